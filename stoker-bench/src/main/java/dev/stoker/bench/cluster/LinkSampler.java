package dev.stoker.bench.cluster;

import dev.stoker.testkit.netns.NetnsTestBed;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** The bed's per-node counters every interval while the trainers run, read from the switch (one command a sample). */
final class LinkSampler implements AutoCloseable {
    /** One reading: node i's counters at {@code unixMillis} (the middle of the command). */
    record Sample(long unixMillis, List<NetnsTestBed.Counters> counters) {}

    private final NetnsTestBed bed;
    private final List<Sample> samples = Collections.synchronizedList(new ArrayList<>());
    private final Thread thread;
    private volatile boolean stopped;

    LinkSampler(NetnsTestBed bed, long intervalMillis) {
        this.bed = bed;
        sample();
        this.thread = Thread.ofPlatform().daemon().name("bench-cluster-links").start(() -> {
            while (!stopped) {
                try {
                    Thread.sleep(intervalMillis);
                } catch (InterruptedException e) {
                    return;
                }
                sample();
            }
        });
    }

    private void sample() {
        try {
            long t0 = System.currentTimeMillis();
            var c = bed.switchSideCounters();
            samples.add(new Sample((t0 + System.currentTimeMillis()) / 2, c));
        } catch (IOException e) {
            // a missed reading: the next one covers it
        }
    }

    List<Sample> samples() {
        synchronized (samples) {
            return List.copyOf(samples);
        }
    }

    /** Stops sampling after one last reading. */
    @Override
    public void close() {
        stopped = true;
        thread.interrupt();
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        sample();
    }

    /** {@code link-samples.csv}: t_ms, then tx and rx bytes per node. */
    static void write(Path file, List<Sample> samples) throws IOException {
        if (samples.isEmpty()) return;
        var sb = new StringBuilder("t_ms");
        int n = samples.getFirst().counters().size();
        for (int i = 0; i < n; i++) sb.append(",tx_bytes_").append(i).append(",rx_bytes_").append(i);
        sb.append('\n');
        long t0 = samples.getFirst().unixMillis();
        for (var s : samples) {
            sb.append(s.unixMillis() - t0);
            for (var c : s.counters()) sb.append(',').append(c.txBytes()).append(',').append(c.rxBytes());
            sb.append('\n');
        }
        Files.writeString(file, sb);
    }
}
