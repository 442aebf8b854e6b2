package dev.stoker.tune;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.EnumMap;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.function.ToDoubleFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The tuner's decisions against a simulated pipeline whose throughput is a function of the knobs (no threads, no clock:
 * ticks are made up, every 500 ms of simulated time, with seeded noise), so each test is exact and cannot depend on load.
 */
@Timeout(60)
class AutotunerTest {
    private static final long TICK_NANOS = TimeUnit.MILLISECONDS.toNanos(500);
    private static final int RANKS = 2, BATCH = 8;
    /** The feed's policy: blocks of four steps of both ranks' batches (FeedTuning's). */
    private static final Autotuner.Policy POLICY = Autotuner.Policy.DEFAULT.withBlockSamples(4L * RANKS * BATCH);

    /** A pipeline model: its samples/s at the knobs, and the CPU and fetch load that implies. */
    static final class SimPipeline implements Knobs {
        final Map<Knob, Integer> values = new EnumMap<>(Knob.class), max = new EnumMap<>(Knob.class);
        final ToDoubleFunction<SimPipeline> cpuCapacity; // samples/s the CPU stage can do at these knobs
        final double fetchSeconds; // per sample, fetch latency
        final double demand; // samples/s the trainers would take (their compute floor)
        final Random noise;
        final double noiseFraction;
        double carry, delivered, waitNanos, timeAtKnobs;
        long nanos;
        int sets;

        SimPipeline(int threads, int fetch, int prefetch, int maxThreads, ToDoubleFunction<SimPipeline> cpuCapacity, double fetchSeconds,
                    double demand, long seed, double noiseFraction) {
            values.put(Knob.CPU_THREADS, threads);
            values.put(Knob.FETCH_CONCURRENCY, fetch);
            values.put(Knob.PREFETCH_BATCHES, prefetch);
            max.put(Knob.CPU_THREADS, maxThreads);
            max.put(Knob.FETCH_CONCURRENCY, 256);
            max.put(Knob.PREFETCH_BATCHES, 16);
            this.cpuCapacity = cpuCapacity;
            this.fetchSeconds = fetchSeconds;
            this.demand = demand;
            this.noise = new Random(seed);
            this.noiseFraction = noiseFraction;
        }

        int threads() { return values.get(Knob.CPU_THREADS); }

        double fetchCapacity() { return values.get(Knob.FETCH_CONCURRENCY) * RANKS / fetchSeconds; }

        /** Samples/s at the knobs now, without noise. */
        double rate() { return Math.min(demand, Math.min(cpuCapacity.applyAsDouble(this), fetchCapacity())); }

        @Override public int get(Knob k) { return values.get(k); }

        @Override public int min(Knob k) { return 1; }

        @Override public int max(Knob k) { return max.get(k); }

        @Override
        public void set(Knob k, int value) {
            assertTrue(value >= 1 && value <= max.get(k), k + " set to " + value);
            values.put(k, value);
            sets++;
        }

        /** Advances one tick: whole batches delivered at the (noisy) rate, the trainers waiting for what is missing. */
        Observation tick() {
            double r = rate() * (1 + noiseFraction * (2 * noise.nextDouble() - 1));
            carry += r * TICK_NANOS / 1e9;
            int batches = (int) (carry / BATCH);
            carry -= batches * BATCH;
            delivered += batches * BATCH;
            waitNanos += Math.max(0, 1 - rate() / demand) * TICK_NANOS * RANKS;
            nanos += TICK_NANOS;
            double cpuCap = cpuCapacity.applyAsDouble(this);
            long busy = Math.round(threads() * Math.min(1, rate() / cpuCap));
            long inFlight = Math.round(values.get(Knob.FETCH_CONCURRENCY) * RANKS * Math.min(1, rate() / fetchCapacity()));
            return new Observation(nanos, (long) delivered, (long) waitNanos, RANKS, busy, inFlight, false, rate() < demand);
        }

        /** Runs the tuner for {@code seconds} of simulated time; returns the mean samples/s after {@code skipSeconds}. */
        double run(Autotuner tuner, double seconds, double skipSeconds) {
            long ticks = Math.round(seconds * 1e9 / TICK_NANOS), skip = Math.round(skipSeconds * 1e9 / TICK_NANOS);
            double sum = 0;
            for (long i = 0; i < ticks; i++) {
                if (i >= skip) sum += rate();
                tuner.observe(tick());
            }
            return sum / (ticks - skip);
        }
    }

    /** The CPU stage: 30 samples/s per thread up to the cores, no more beyond them. */
    private static ToDoubleFunction<SimPipeline> perThread(double perThread, int cores) {
        return p -> perThread * Math.min(p.threads(), cores);
    }

    @Test
    void wrongKnobsAreRaisedToTheMachinesBest() {
        // 4 cores at 30 samples/s each: 120; fetch 50 ms: 40 samples/s per concurrent fetch over 2 ranks; trainers take 1000
        var sim = new SimPipeline(1, 1, 1, 4, perThread(30, 4), 0.05, 1000, 7, 0.05);
        var tuner = new Autotuner(sim, POLICY, null);
        double steady = sim.run(tuner, 600, 120);
        assertEquals(4, sim.get(Knob.CPU_THREADS), tuner.decisions().toString());
        assertTrue(sim.fetchCapacity() >= 120, "fetch concurrency " + sim.get(Knob.FETCH_CONCURRENCY) + ": " + tuner.decisions());
        assertTrue(steady >= 0.9 * 120, "steady " + steady + " of 120: " + tuner.decisions());
        // every decision names its knob's move and its evidence; one knob at a time, each a bounded step
        for (var d : tuner.decisions()) {
            assertTrue(d.knob() == Knob.CPU_THREADS ? Math.abs(d.to() - d.from()) == 1
                    : d.to() == 2 * d.from() || d.from() == 2 * d.to() || d.why().contains("Little's law") && d.to() <= 8 * d.from(), d.text());
            assertFalse(d.why().isBlank());
        }
        assertTrue(tuner.kept() >= 5, tuner.decisions().toString()); // 3 threads, at least 2 fetch doublings
    }

    /**
     * The ladder bench's "wrong knobs" case as measured (issue 30, 2 vCPUs): at 1 thread the CPU stage does ~45 samples/s,
     * and 2 fetches per rank of ~89 ms do as much, so from 1 thread / 2 fetches neither raise alone gains and both together
     * double the rate. The tuner measured ~1.04× of 1T/2F and rolled each back; it must reach ≥ 90% of 2 threads' 90
     * samples/s within a minute of starting.
     */
    @Test
    void twoStagesLimitingAtTheSameRateAreBothRaised() {
        var sim = new SimPipeline(1, 1, 1, 2, perThread(45, 2), 0.089, 1000, 13, 0.05);
        var tuner = new Autotuner(sim, POLICY, null);
        double steady = sim.run(tuner, 180, 60);
        assertEquals(2, sim.get(Knob.CPU_THREADS), tuner.decisions().toString());
        assertTrue(sim.fetchCapacity() >= 90, "fetch concurrency " + sim.get(Knob.FETCH_CONCURRENCY) + ": " + tuner.decisions());
        assertTrue(steady >= 0.9 * 90, "steady " + steady + " of 90: " + tuner.decisions());
        // the same start with the fetches at 2 per rank, where the two stages hide each other exactly
        var tied = new SimPipeline(1, 2, 1, 2, perThread(45, 2), 0.089, 1000, 17, 0.05);
        var second = new Autotuner(tied, POLICY, null);
        double steadyTied = tied.run(second, 180, 60);
        assertTrue(steadyTied >= 0.9 * 90, "steady " + steadyTied + " of 90: " + second.decisions());
        assertTrue(second.decisions().stream().anyMatch(d -> d.kept() && d.why().contains("no longer")), "a raise kept for moving the "
                + "bottleneck: " + second.decisions());
    }

    @Test
    void moreThreadsIsSlowerSoTheTunerLowersThem() {
        // contention: 30 samples/s per thread up to 3, then each thread more costs 12 (a process-wide lock, oversubscription)
        ToDoubleFunction<SimPipeline> contended = p -> p.threads() <= 3 ? 30.0 * p.threads() : 90 - 12.0 * (p.threads() - 3);
        var sim = new SimPipeline(7, 64, 4, 8, contended, 0.05, 1000, 11, 0.05);
        var tuner = new Autotuner(sim, POLICY, null);
        double steady = sim.run(tuner, 600, 150);
        assertEquals(3, sim.get(Knob.CPU_THREADS), tuner.decisions().toString());
        assertTrue(tuner.decisions().stream().anyMatch(d -> d.knob() == Knob.CPU_THREADS && d.to() < d.from() && d.kept()),
                "a lowering kept: " + tuner.decisions());
        assertTrue(steady >= 0.9 * 90, "steady " + steady + ": " + tuner.decisions());
    }

    @Test
    void aRaiseThatDoesNotPayIsRolledBack() {
        // CPU-bound at its ceiling of 2 threads: more fetches or prefetch buy nothing and must go back
        var sim = new SimPipeline(2, 64, 4, 2, perThread(30, 2), 0.05, 1000, 3, 0.02);
        var tuner = new Autotuner(sim, POLICY, null);
        sim.run(tuner, 120, 0);
        assertTrue(tuner.decisions().size() >= 3, tuner.decisions().toString());
        assertTrue(tuner.decisions().subList(0, 3).stream().noneMatch(d -> d.kept()), tuner.decisions().toString());
        // fetches the CPU-bound feed does not use may be given back (64 → 32 → … costs nothing), never below what it needs
        assertTrue(sim.fetchCapacity() >= 60, tuner.decisions().toString());
        var fetch = tuner.decisions().stream().filter(d -> d.knob() == Knob.FETCH_CONCURRENCY).findFirst().orElseThrow();
        assertEquals(64, fetch.from());
        assertEquals(128, fetch.to());
        assertFalse(fetch.kept(), fetch.text());
        // the contention probe (2 → 1 threads) halves the rate: rolled back too
        var lower = tuner.decisions().stream().filter(d -> d.knob() == Knob.CPU_THREADS).findFirst().orElseThrow();
        assertEquals(1, lower.to());
        assertFalse(lower.kept(), lower.text());
        assertTrue(lower.afterSamplesPerS() < 0.7 * lower.beforeSamplesPerS(), lower.text());
    }

    /**
     * The ladder's defaults with autotune on (issue 30: ≤ 5% cost): CPU-bound at the cores, the contention probe (2 → 1
     * threads) halves the rate while it is tried, so it must end on its first block — a whole window of 4–12 s at half the
     * rate is, by arithmetic, 2–6% of the 95-s ladder run (which measured 0.95× of the pinned defaults before this rule).
     */
    @Test
    void aContentionProbeThatHalvesTheRateEndsOnItsFirstBlock() {
        var sim = new SimPipeline(2, 64, 4, 2, perThread(50, 2), 0.05, 1000, 23, 0.05);
        var tuner = new Autotuner(sim, POLICY, null);
        int ticksAtOne = 0;
        for (int i = 0; i < 240; i++) { // 120 s
            tuner.observe(sim.tick());
            if (sim.threads() == 1) ticksAtOne++;
        }
        var lower = tuner.decisions().stream().filter(d -> d.knob() == Knob.CPU_THREADS && d.to() < d.from()).findFirst().orElseThrow(
                () -> new AssertionError("a contention probe in 2 minutes: " + tuner.decisions()));
        assertFalse(lower.kept(), lower.text());
        assertTrue(lower.why().contains("rolled back at once"), lower.text());
        assertTrue(ticksAtOne * TICK_NANOS <= TimeUnit.MILLISECONDS.toNanos(3000), "at 1 thread for " + ticksAtOne * 0.5 + " s: " + lower.text());
    }

    @Test
    void aTunedFeedIsNotThrashed() {
        // the defaults are already best: over 20 minutes the probes cost at most a few percent, and become rare
        var sim = new SimPipeline(2, 64, 4, 2, perThread(30, 2), 0.05, 1000, 5, 0.08);
        var tuner = new Autotuner(sim, POLICY, null);
        double mean = sim.run(tuner, 1200, 0);
        assertTrue(mean >= 0.95 * 60, "the issue's budget, 5%: mean " + mean + " of 60: " + tuner.decisions());
        long late = tuner.decisions().stream().filter(d -> d.atMillis() > 600_000).count();
        long early = tuner.decisions().stream().filter(d -> d.atMillis() <= 600_000).count();
        assertTrue(late < early, "probes grow rarer: " + early + " then " + late);
        // the tuner may give back fetches the feed does not use (64 → 2 costs nothing here), never the rate
        assertEquals(2, sim.get(Knob.CPU_THREADS), tuner.decisions().toString());
        assertTrue(sim.rate() >= 60, tuner.decisions().toString());
    }

    @Test
    void nothingChangesBeforeTheWarmUpNorWhileTrainersDoNotWait() {
        var sim = new SimPipeline(1, 1, 1, 4, perThread(30, 4), 0.05, 1000, 1, 0.0);
        var tuner = new Autotuner(sim, POLICY, null);
        sim.run(tuner, 4.5, 0); // less than the 5 s warm-up
        assertEquals(0, sim.sets);
        // trainers slower than the pipeline's worst (10 samples/s against 30): they never wait, there is nothing to win
        var slow = new SimPipeline(1, 1, 1, 4, perThread(30, 4), 0.05, 10, 1, 0.05);
        var idle = new Autotuner(slow, POLICY, null);
        slow.run(idle, 300, 0);
        assertEquals(0, slow.sets);
        assertTrue(idle.summary().contains("nothing to win"), idle.summary());
    }

    @Test
    void windowsAndTicksAreChecked() {
        var sim = new SimPipeline(1, 1, 1, 4, perThread(30, 4), 0.05, 1000, 1, 0.0);
        var tuner = new Autotuner(sim, POLICY, null);
        tuner.observe(new Observation(10, 0, 0, 2, 0, 0, false, true));
        assertThrows(IllegalArgumentException.class, () -> tuner.observe(new Observation(5, 0, 0, 2, 0, 0, false, true)));
        assertThrows(IllegalArgumentException.class, () -> new Autotuner.Policy(0, 0, 10, 5, 1, 0, 0, 2, 0, 0, 0, 1, 1));
        assertThrows(IllegalArgumentException.class, () -> new Observation(0, 0, 0, 0, 0, 0, false, false));
    }
}
