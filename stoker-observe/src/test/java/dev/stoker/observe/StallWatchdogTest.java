package dev.stoker.observe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.testkit.FakeTicker;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;
import java.util.function.LongFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The stall rules on constructed observations, and the running watchdog on a constructed probe. */
@Timeout(60)
class StallWatchdogTest {
    static final long N = 30_000;
    static final long GIB = 1L << 30;

    /** A mutable description of one tick, turned into an {@link StallWatchdog.Observation}. */
    static final class Feed {
        long fetched, inFlight, encoded, queued, busy, storeInUse, storeBudget, leases;
        long[] delivered = new long[2];
        boolean[] full = new boolean[2];

        StallWatchdog.Observation at(long t) {
            return new StallWatchdog.Observation(t, fetched, inFlight, encoded, queued, busy, delivered.clone(), full.clone(),
                    storeInUse, storeBudget, leases);
        }
    }

    /** Runs {@code seconds} one-second ticks, {@code change} applied before each; returns every warning. */
    static List<String> run(Feed f, int seconds, java.util.function.IntConsumer change) {
        var state = StallWatchdog.State.initial();
        var out = new ArrayList<String>();
        for (int i = 0; i <= seconds; i++) {
            change.accept(i);
            var s = StallWatchdog.step(state, f.at(i * 1000L), N);
            state = s.state();
            out.addAll(s.warnings());
        }
        return out;
    }

    @Test
    void fetchStallWarnsOnceNamingTheObjectStore() {
        var f = new Feed();
        f.inFlight = 64;
        var w = run(f, 100, i -> { });
        assertEquals(List.of("stall: no sample fetched for 30 s, 64 fetches in flight (waiting on the object store)"), w);
    }

    @Test
    void fetchStallWarnsAfterExactlyNSecondsWithoutProgress() {
        var f = new Feed();
        f.inFlight = 64;
        var w = run(f, 39, i -> { if (i <= 10) f.fetched++; }); // progress until t=10 s: warns at 40 s, not before
        assertTrue(w.isEmpty(), w.toString());
        w = run(f, 40, i -> { if (i <= 10) f.fetched++; });
        assertEquals(1, w.size());
    }

    @Test
    void oneWarningPerEpisodeAndANewOneAfterRecovery() {
        var f = new Feed();
        f.inFlight = 8;
        // stalls 0..50, progresses at 51, stalls again to 120: two episodes
        var w = run(f, 120, i -> { if (i == 51) f.fetched++; });
        assertEquals(2, w.size(), w.toString());
    }

    @Test
    void encodeStallNamesTheQueue() {
        var f = new Feed();
        f.queued = 12;
        var w = run(f, 60, i -> { });
        assertEquals(List.of("stall: no sample encoded for 30 s with 12 queued (CPU stage stuck?)"), w);
    }

    @Test
    void rankWithFullBufferThatTookNothingWarns() {
        var f = new Feed();
        f.delivered = new long[] {5, 5};
        f.full = new boolean[] {false, true};
        var w = run(f, 60, i -> f.delivered[0]++); // rank 0 keeps reading; rank 1 stopped
        assertEquals(List.of("stall: rank 1 has taken no batch for 30 s, its buffer is full (the trainer stopped reading)"), w);
    }

    @Test
    void storeBudgetExhaustedByLeases() {
        var f = new Feed();
        f.storeBudget = 4 * GIB;
        f.storeInUse = 4 * GIB;
        f.leases = 16;
        var w = run(f, 60, i -> { });
        assertEquals(List.of("stall: store budget exhausted: 4.0 GiB in use by 16 leases (trainers hold their batches)"), w);
    }

    @Test
    void noAlarmWhenIdleBecauseNobodyAsks() {
        var f = new Feed(); // nothing in flight, nothing queued, buffers not full, store empty
        f.delivered = new long[] {3, 3};
        assertTrue(run(f, 300, i -> { }).isEmpty());
    }

    @Test
    void noAlarmWhenTrainersAreSlowButStillReading() {
        // trainer-bound: buffers full all the time, fetch and encode idle, store nearly full, a batch taken every 20 s
        var f = new Feed();
        f.full = new boolean[] {true, true};
        f.delivered = new long[] {1, 1};
        f.storeBudget = 4 * GIB;
        f.storeInUse = 4 * GIB;
        f.leases = 2;
        var w = run(f, 300, i -> {
            if (i % 20 == 0) { f.delivered[0]++; f.delivered[1]++; }
        });
        assertTrue(w.isEmpty(), w.toString());
    }

    @Test
    void noAlarmForARankWhoseTrainerHasNotConnected() {
        var f = new Feed();
        f.full = new boolean[] {true, true}; // buffers filled before any trainer came
        assertTrue(run(f, 300, i -> { }).isEmpty());
    }

    @Test
    void noAlarmWhenStagesProgressSteadily() {
        var f = new Feed();
        f.inFlight = 64;
        f.queued = 12;
        f.busy = 2;
        var w = run(f, 300, i -> { f.fetched += 10; f.encoded += 10; });
        assertTrue(w.isEmpty(), w.toString());
    }

    /**
     * The running watchdog on a clock moved by hand: it warns once the stall has lasted its limit, once per episode,
     * through its sink. (FeederTest's stall case runs one on the real clock, in a real feed.)
     */
    @Test
    void runningWatchdogLogsThroughItsSinkAndStopsOnClose() throws Exception {
        var logged = new CopyOnWriteArrayList<String>();
        var f = new Feed();
        f.inFlight = 3;
        LongFunction<StallWatchdog.Observation> probe = f::at;
        var ticker = new FakeTicker();
        try (var dog = new StallWatchdog(200, 5, probe, logged::add, ticker)) {
            await(() -> dog.ticks() > 0); // its first observation, at time 0
            ticker.advanceMillis(199);
            long before = dog.ticks();
            await(() -> dog.ticks() > before + 1);
            assertEquals(List.of(), logged, "199 ms without progress is no stall yet");
            ticker.advanceMillis(1);
            await(() -> !logged.isEmpty());
            long warned = dog.ticks();
            ticker.advanceMillis(1000);
            await(() -> dog.ticks() > warned + 1); // same episode: no second warning
            assertEquals(1, logged.size(), logged.toString());
            assertTrue(logged.get(0).startsWith("stall: no sample fetched for 0.2 s, 3 fetches in flight"), logged.get(0));
            assertEquals(1, dog.warningsLogged());
            dog.stallMillis(0); // disabled
            assertEquals(0, dog.stallMillis());
        }
    }

    /** Waits until {@code condition} holds (the watchdog ticks every few ms of real time); fails after 10 s. */
    private static void await(BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within 10 s");
            Thread.sleep(1);
        }
    }
}
