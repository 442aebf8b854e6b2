package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.core.ScheduleCursor;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link FeedProtocol.Welcome#advance}, the cursor {@code TrainerClient.state()} reports (audit #28): arithmetic
 * equal to walking the schedule one step at a time, over many random schedules and cursors, and bounded work
 * however many batches a connection has taken.
 */
@Timeout(60)
class WelcomeAdvanceTest {
    private static FeedProtocol.Welcome welcome(long n, long pps) {
        return new FeedProtocol.Welcome(FeedProtocol.VERSION, FeedProtocol.DELIVERY_COPY, 0, 0, 1, Math.max(1, n / Math.max(pps, 1)),
                0, 0, n, pps);
    }

    /** The schedule's rule one step at a time (the implementation before audit #28), as the oracle. */
    private static ScheduleCursor walk(ScheduleCursor c, long n, long pps, long steps) {
        long e = c.epoch(), pos = c.position();
        if (pps <= 0 || n <= 0) return c;
        for (long i = 0; i < steps; i++) {
            pos += pps;
            if (pos + pps > n) {
                e++;
                pos = 0;
            }
        }
        return new ScheduleCursor(e, pos);
    }

    @Test
    void equalsTheStepByStepWalkOverRandomCases() {
        var rnd = new SplittableRandom(28);
        for (int i = 0; i < 50_000; i++) {
            long n = rnd.nextLong(1, 61);
            long pps = rnd.nextBoolean() ? rnd.nextLong(1, 13) : rnd.nextLong(1, 81); // also steps larger than an epoch
            // positions on the step grid and off it, and past the last whole step (a resized job's cursor)
            long pos = rnd.nextBoolean() ? rnd.nextLong(0, n / pps + 1) * pps : rnd.nextLong(0, n + 6);
            var c = new ScheduleCursor(rnd.nextLong(0, 6), pos);
            long steps = switch (rnd.nextInt(4)) {
                case 0 -> 0;
                case 1 -> 1;
                case 2 -> 2;
                default -> rnd.nextLong(0, 301);
            };
            assertEquals(walk(c, n, pps, steps), welcome(n, pps).advance(c, steps),
                    "n=" + n + " pps=" + pps + " cursor=" + c + " steps=" + steps);
        }
    }

    @Test
    void tenMillionStepsAgreeWithTheWalk() {
        var c = new ScheduleCursor(3, 48);
        assertEquals(walk(c, 1000, 24, 10_000_000), welcome(1000, 24).advance(c, 10_000_000));
    }

    @Test
    void degenerateSchedulesAndNonPositiveStepsLeaveTheCursor() {
        var c = new ScheduleCursor(2, 4);
        assertEquals(c, welcome(0, 4).advance(c, 10));
        assertEquals(c, welcome(10, 0).advance(c, 10));
        assertEquals(c, welcome(10, 4).advance(c, 0));
        assertEquals(c, welcome(10, 4).advance(c, -3));
    }

    /**
     * 10^15 steps: the walk would take days (about 10^6 s at a nanosecond a step), so this method's own
     * timeout bounds the work far above what arithmetic needs (on its own thread: a loop that never checks for
     * interruption would not end on the test's thread); the answer is checked against the rule.
     */
    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void aConnectionOfAQuadrillionBatchesCostsArithmetic() {
        long steps = 1_000_000_000_000_000L;
        // 1000 samples, 24 a step: 41 steps an epoch; from position 48, 39 steps end epoch 3
        long rest = steps - 39;
        assertEquals(new ScheduleCursor(4 + rest / 41, rest % 41 * 24), welcome(1000, 24).advance(new ScheduleCursor(3, 48), steps));
    }
}
