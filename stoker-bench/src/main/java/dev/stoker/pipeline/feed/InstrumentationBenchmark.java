package dev.stoker.pipeline.feed;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Threads;

/**
 * What the feed's instrumentation costs (issue 5: under 1% of throughput): the exact counter,
 * clock and histogram calls a sample and a batch make on the hot path, two threads at once as on
 * the CPU pool, and the counter reads of one timeline tick. Divide by the work they instrument
 * (about 30 ms of CPU per sample at the ladder's reference settings) for the overhead.
 *
 * <pre>./stoker jmh InstrumentationBenchmark -f 1 -wi 3 -i 5 -w 1s -r 1s</pre>
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class InstrumentationBenchmark {
    final FeedMetrics m = new FeedMetrics();

    /** A sample's fetch and encode bookkeeping (SamplePipeline.fetch and onCpu). */
    @Benchmark
    @Threads(2)
    public long perSample() {
        m.fetchStarted.increment();
        long t = System.nanoTime();
        m.fetchedSamples.increment();
        m.fetchedBytes.add(300_000);
        long took = System.nanoTime() - t;
        m.fetchNanos.add(took);
        m.fetchLatency.record(took);
        m.encodeStarted.increment();
        long t0 = m.cpuStart();
        m.encodedSamples.increment();
        long took2 = System.nanoTime() - t0;
        m.encodeNanos.add(took2);
        m.encodeLatency.record(took2);
        m.cpuEnd(t0);
        return took + took2;
    }

    /** A batch's assembly and delivery bookkeeping. */
    @Benchmark
    @Threads(2)
    public long perBatch() {
        long t0 = m.cpuStart();
        m.assembledBatches.increment();
        m.assembledBytes.add(82_000_000);
        long took = System.nanoTime() - t0;
        m.assembleNanos.add(took);
        m.assembleLatency.record(took);
        m.cpuEnd(t0);
        m.deliveredBatches.increment();
        m.deliveredSamples.add(8);
        m.deliverLatency.record(took);
        return took;
    }

    /** The counter reads of one 100 ms timeline tick (buffer and store reads left out: one lock each). */
    @Benchmark
    public long tickReads() {
        return m.fetchedSamples.sum() + m.encodedSamples.sum() + m.deliveredSamples.sum() + m.fetchInFlight() + m.cpuBusyNow();
    }
}
