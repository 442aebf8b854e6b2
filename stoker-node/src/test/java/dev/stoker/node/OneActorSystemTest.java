package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * One actor system per node process: a local node's feed, and the feed it reopens when its trainers move the job back to
 * a checkpoint, run their streams on the one system the node's feeds start ({@code stoker-node}), and closing the node
 * stops it. Before, every feed started a system of its own (and a cluster member's task producers one per job beside the
 * member's): threads, dispatchers and a scheduler each.
 *
 * <p>Systems are counted by their scheduler threads, which Pekko names {@code <system>-scheduler-<n>}, one per system.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class OneActorSystemTest {
    static final int SAMPLES = 16, RANKS = 2, BATCH = 2;
    @TempDir Path tmp;

    /** Live actor systems of this JVM by name, from their scheduler threads. */
    static Map<String, Integer> systems() {
        var out = new TreeMap<String, Integer>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            var name = t.getName();
            int i = name.lastIndexOf("-scheduler-");
            if (i > 0 && t.isAlive()) out.merge(name.substring(0, i), 1, Integer::sum);
        }
        return out;
    }

    @Test
    void aNodesFeedsAndTheFeedItReopensRunOnOneActorSystem() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        var config = NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(BATCH).threads(2).warmUpMillis(0)
                .shmDir(Files.createDirectories(tmp.resolve("shm"))).shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1)
                .processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176).build();
        var before = systems();
        assertEquals(null, before.get("stoker-node"), "no node's system before: " + before);
        try (var feeds = NodeFeeds.open(config); var ledger = feeds.start(FeedMode.PREFETCH, null);
             var server = new FeedServer(tmp.resolve("t.sock"), ledger, false)) {
            TrainerClient.State saved;
            try (var c = TrainerClient.connect(server.socketPath(), 0, RANKS, "t", TrainerClient.Options.SHARED_MEMORY)) {
                c.next().close();
                saved = c.state();
                c.next().close();
                c.next().close();
            }
            assertEquals(Integer.valueOf(1), systems().get("stoker-node"), "the node's one system: " + systems());
            // every rank resumes from the checkpoint behind the running feed: the node reopens its feed there
            for (int r = 0; r < RANKS; r++) {
                try (var c = TrainerClient.connect(server.socketPath(), r, RANKS, "t", TrainerClient.Options.SHARED_MEMORY.resumingFrom(saved))) {
                    c.next().close();
                }
            }
            assertEquals(1, ledger.repositions(), "the job moved back, on a feed opened again");
            var during = systems();
            assertEquals(Integer.valueOf(1), during.get("stoker-node"), "still one system: " + during);
            assertEquals(before.getOrDefault("stoker-feed", 0), during.getOrDefault("stoker-feed", 0),
                    "no feed started a system of its own: " + during);
        }
        // the system has terminated when close returns; its scheduler thread ends right after
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (systems().containsKey("stoker-node") && System.nanoTime() < deadline) Thread.sleep(10);
        assertEquals(null, systems().get("stoker-node"), "closing the node's feeds stops its system: " + systems());
    }
}
