package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.Npy;
import java.util.Arrays;
import java.util.Map;

/** The audio rows of a padded batch, held to one sample's {@code encode} files (AudioServeTest, AudioWireTest, AudioFamiliesServeTest). */
final class AudioRows {
    private AudioRows() {}

    /**
     * Checks sample {@code e}'s clips, which start at row {@code clip} of the batch's {@code input_features} bytes {@code f}
     * and {@code feature_attention_mask} bytes {@code m} ({@code t} frames a row): each clip's frames are its
     * {@code input_features.npy} row bit for bit, then zeros, and its mask its own, then zeros.
     *
     * @return the sample's frames (its files' T)
     */
    static int assertClips(String what, Map<String, Npy.Array> e, byte[] f, byte[] m, int t, int clip) {
        var ef = e.get("input_features");
        int clips = (int) ef.shape()[0], own = (int) ef.shape()[2];
        byte[] efd = ef.data(), emd = e.get("feature_attention_mask").data();
        for (int k = 0; k < clips; k++, clip++) {
            for (int bin = 0; bin < AudioPreset.MEL_BINS; bin++) {
                int at = ((clip * AudioPreset.MEL_BINS + bin) * t) * 4, from = ((k * AudioPreset.MEL_BINS + bin) * own) * 4;
                assertArrayEquals(Arrays.copyOfRange(efd, from, from + own * 4), Arrays.copyOfRange(f, at, at + own * 4),
                        what + " clip " + k + " mel bin " + bin);
                for (int x = at + own * 4; x < at + t * 4; x++) if (f[x] != 0) throw new AssertionError(what + ": nonzero past the clip");
            }
            assertArrayEquals(Arrays.copyOfRange(emd, k * own * 4, (k + 1) * own * 4),
                    Arrays.copyOfRange(m, clip * t * 4, clip * t * 4 + own * 4), what + " clip " + k + " mask");
            for (int x = clip * t * 4 + own * 4; x < (clip + 1) * t * 4; x++) if (m[x] != 0) throw new AssertionError(what + ": mask past the clip");
        }
        return own;
    }
}
