package dev.stoker.audio;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.core.AudioPreset;
import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What the cache's audio entry rests on (issue 32, item 4; docs/cache.md): a clip's {@link WhisperLogMel#head} frames give
 * both modes' features bit for bit — the valid ones by {@link WhisperLogMel#slice} (so {@code --audio-pad hf} and
 * {@code valid} share one entry: the padding changes no valid frame, the floor "max - 8" is taken over the same frames in
 * both) and the padded ones by {@link WhisperLogMel#padTo}; and under Qwen3-Omni, whose padded length is the call's longest
 * clip, the head is the same for every padded length at least three frames past the valid ones (the key's "padded" form).
 * On the committed fixture clip and on a loud noise and an all-zero clip, at lengths around every frame edge.
 */
@Timeout(60)
class WhisperLogMelHeadTest {
    private static float[] noise(int n, long seed) {
        var r = new java.util.Random(seed);
        float[] pcm = new float[n];
        for (int i = 0; i < n; i++) pcm[i] = (float) (r.nextGaussian() * 0.3);
        return pcm;
    }

    private static void assertSame(WhisperLogMel.Features expected, WhisperLogMel.Features actual, String what) {
        assertEquals(expected.frames(), actual.frames(), what + ": frames");
        assertEquals(expected.validFrames(), actual.validFrames(), what + ": valid frames");
        for (int i = 0; i < expected.values().length; i++)
            if (Float.floatToRawIntBits(expected.values()[i]) != Float.floatToRawIntBits(actual.values()[i]))
                assertEquals(expected.values()[i], actual.values()[i], what + ": value " + i + " (bin " + i / expected.frames() + ")");
    }

    @Test
    void theHeadGivesTheValidAndThePaddedFeaturesOfEveryPaddedLength() throws IOException {
        var mel = new WhisperLogMel();
        float[] fixture = Fixtures.clip();
        int checked = 0;
        for (float[] clip : new float[][] {fixture, noise(16_000 * 3 + 77, 7), new float[4_000]}) {
            for (int n : new int[] {clip.length, clip.length - 1, clip.length - 159, clip.length - 160, clip.length - 161, 160, 321, 401}) {
                for (long padded : new long[] {n, n + 1, n + 40, n + 159, n + 200, n + 201, n + 320, n + 480, n + 481, n + 640, n + 999, 3L * n,
                        16_000L * 30}) {
                    if (padded < n || AudioPreset.totalFrames(padded) < 1) continue;
                    String what = "clip of " + clip.length + ", " + n + " samples padded to " + padded;
                    var head = mel.head(clip, n, padded);
                    int total = AudioPreset.totalFrames(padded), valid = AudioPreset.maskFrames(n, padded);
                    assertSame(mel.compute(clip, n, padded, valid), WhisperLogMel.slice(head, valid), what + ", valid");
                    assertSame(mel.compute(clip, n, padded, total), WhisperLogMel.padTo(head, total), what + ", padded");
                    checked++;
                }
            }
        }
        assertEquals(3 * 8 * 13, checked, "every case ran");
    }

    @Test
    void underQwen3OmniTheHeadIsTheSameForEveryLengthThreeFramesPastTheValidOnes() throws IOException {
        var mel = new WhisperLogMel();
        for (float[] clip : new float[][] {Fixtures.clip(), noise(16_000 * 2 + 5, 11), new float[3_333]}) {
            int n = clip.length;
            long first = 160L * (AudioPreset.maskFrames(n, Long.MAX_VALUE / 2) + 3); // the shortest length of the "padded" form
            var reference = mel.head(clip, n, first);
            assertEquals(AudioPreset.maskFrames(n, first) + 3, reference.frames());
            for (long padded : new long[] {first + 1, first + 159, first + 160, first + 1_000, 2L * n + 12_345, 16_000L * 60}) {
                var head = mel.head(clip, n, padded);
                assertArrayEquals(reference.values(), head.values(), "clip of " + n + " padded to " + padded + " or " + first);
                assertEquals(reference.validFrames(), head.validFrames());
            }
            // one frame short of the form: its last frame may still see the clip, so that length is keyed by itself
            assertEquals(AudioPreset.maskFrames(n, first - 160) + 2, WhisperLogMel.headFrames(n, first - 160));
        }
    }
}
