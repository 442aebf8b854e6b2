package dev.stoker.plan.schedule;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ScheduleCursor;
import java.util.HashSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class SourceMixTest {

    @Test
    void eachSourcePermutationIsABijectionPerSourceEpochAndDiffersBetweenEpochs() {
        for (int size : new int[] {1, 2, 3, 7, 64, 100, 257, 1000}) {
            var mix = new SourceMix(9, new int[] {size, 5}, new double[] {0.5, 1});
            for (long q = 0; q < 3; q++) {
                var seen = new HashSet<Integer>();
                for (int r = 0; r < size; r++) {
                    int v = mix.permute(0, q, r);
                    assertTrue(v >= 0 && v < size, "in range");
                    assertTrue(seen.add(v), "size " + size + " epoch " + q + ": " + v + " twice");
                }
            }
            if (size >= 64) {
                int same = 0;
                for (int r = 0; r < size; r++) if (mix.permute(0, 0, r) == mix.permute(0, 1, r)) same++;
                assertTrue(same < size / 4, "epochs 0 and 1 order the source alike at " + same + " of " + size);
            }
        }
    }

    @Test
    void oneSourceOfWeightOneIsTheScheduleAsItWas() {
        var plain = new SampleSchedule(7, 103, 2, 4);
        var mixed = new SampleSchedule(7, SourceMix.single(7, 103), 2, 4);
        for (long step = 0; step < 30; step++)
            for (int r = 0; r < 2; r++) {
                var c = plain.cursorAt(step);
                assertArrayEquals(plain.batchAt(c, r), mixed.batchAt(c, r));
            }
    }

    /** Weight 3 repeats a small source three times an epoch; weight 0.5 takes half a large one, the other half the next epoch. */
    @Test
    void weightsGivePassesPerEpochWithoutReplacementWithinASourceEpoch() {
        int big = 1000, small = 40;
        var mix = new SourceMix(3, new int[] {big, small}, new double[] {0.5, 3});
        assertEquals(500, mix.placesOf(0));
        assertEquals(120, mix.placesOf(1));
        assertEquals(620, mix.places());
        var schedule = new SampleSchedule(3, mix, 1, 620 / 4 / 5 * 5); // whole epochs in few steps
        int[] bigCount = new int[big], smallCount = new int[small];
        for (long e = 0; e < 2; e++) {
            int[] smallThisEpoch = new int[small];
            var perm = schedule.permutationCopy(e);
            for (int p = 0; p < mix.places(); p++) {
                int rec = mix.record(e, perm[p]);
                if (rec < big) bigCount[rec]++;
                else smallThisEpoch[rec - big]++;
            }
            for (int c : smallThisEpoch) assertEquals(3, c, "each record of the small source three times an epoch");
            for (int i = 0; i < small; i++) smallCount[i] += smallThisEpoch[i];
        }
        for (int c : bigCount) assertEquals(1, c, "the large source's two half-epochs draw each record once");
    }

    /** Within any stretch of the order, each source's share is within statistical bounds of its places' share. */
    @Test
    void realisedProportionsFollowTheWeights() {
        var mix = new SourceMix(11, new int[] {5000, 300, 2000}, new double[] {1, 2, 0.25});
        double[] share = {5000.0 / 6100, 600.0 / 6100, 500.0 / 6100};
        var schedule = new SampleSchedule(11, mix, 4, 8);
        int window = 1024;
        for (long e = 0; e < 3; e++) {
            for (int start = 0; start + window <= mix.places(); start += window) {
                int[] got = new int[3];
                for (int pos = start; pos < start + window; pos += 32) {
                    for (int r = 0; r < 4; r++)
                        for (int rec : schedule.batchAt(new ScheduleCursor(e, pos), r)) got[mix.sourceOfRecord(rec)]++;
                }
                for (int i = 0; i < 3; i++) {
                    double sd = Math.sqrt(window * share[i] * (1 - share[i]));
                    assertTrue(Math.abs(got[i] - window * share[i]) < 5 * sd,
                            "epoch " + e + " window at " + start + ": source " + i + " got " + got[i] + " of " + window + ", expected ~" + window * share[i]);
                }
            }
        }
    }

    @Test
    void weightsMustBePositive() {
        assertThrows(IllegalArgumentException.class, () -> new SourceMix(1, new int[] {10}, new double[] {0}));
        assertThrows(IllegalArgumentException.class, () -> new SourceMix(1, new int[] {10}, new double[] {Double.NaN}));
        assertThrows(IllegalArgumentException.class, () -> new SourceMix(1, new int[] {10, 3}, new double[] {1}));
    }

    @Test
    void recordNumbersMapBackToTheirSource() {
        var mix = new SourceMix(1, new int[] {10, 1, 5}, new double[] {1, 1, 1});
        assertEquals(0, mix.sourceOfRecord(9));
        assertEquals(1, mix.sourceOfRecord(10));
        assertEquals(2, mix.sourceOfRecord(11));
        assertEquals(2, mix.sourceOfRecord(15));
        assertEquals(11, mix.base(2));
    }
}
