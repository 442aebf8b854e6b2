package dev.stoker.audio;

import dev.stoker.core.AudioPreset;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.Npy;
import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link WhisperLogMel} against transformers 5.18.0's WhisperFeatureExtractor (numpy path) on the committed fixture
 * clip: the same PCM gives the same features to float32 rounding, in the valid mode of each padding rule and in the
 * padded mode.
 */
@Timeout(60)
class WhisperLogMelTest {
    /**
     * The largest difference allowed: two float32 steps near 1. Measured: 0 on these fixtures and on all 32 clips
     * of tools/audio-check (RESULTS.md); the FFTs differ (JTransforms, pocketfft), and Java's and the C library's
     * cos/log10 may differ in a last bit on another platform, which is what this margin is for.
     */
    static final double TOLERANCE = 2.5e-7;

    private static double maxDiff(float[] expected, long[] shape, WhisperLogMel.Features actual) {
        assertEquals(2, shape.length);
        assertEquals(128, shape[0]);
        assertEquals(shape[1], actual.frames(), "frames");
        double max = 0;
        for (int i = 0; i < expected.length; i++) max = Math.max(max, Math.abs(expected[i] - actual.values()[i]));
        return max;
    }

    @Test
    void qwen3OmniAClipAloneIsNotPaddedAndMatchesTheExtractor() throws IOException {
        float[] pcm = Fixtures.clip();
        Npy.Array ref = Fixtures.npy("qwen3_valid.npy");
        var f = new WhisperLogMel().valid(pcm, AudioPreset.QWEN3_OMNI);
        double d = maxDiff(ref.asFloats(), ref.shape(), f);
        assertTrue(d <= TOLERANCE, "max |Δ| " + d);
        assertEquals(18, f.validFrames());
        // and hfPadded is the same thing: a clip alone under padding=True has no padding
        assertArrayEquals(f.values(), new WhisperLogMel().hfPadded(pcm, AudioPreset.QWEN3_OMNI).values());
    }

    @Test
    void qwen2AudioValidFramesAreThePaddedOutputsMaskedFrames() throws IOException {
        float[] pcm = Fixtures.clip();
        Npy.Array ref = Fixtures.npy("qwen2_valid.npy");
        var f = new WhisperLogMel().valid(pcm, AudioPreset.QWEN2_AUDIO);
        double d = maxDiff(ref.asFloats(), ref.shape(), f);
        assertTrue(d <= TOLERANCE, "max |Δ| " + d);
        assertEquals(Fixtures.meta().get("qwen2_valid_frames").asInt(), f.validFrames());
        // padded by the processor, the clip has one frame more than alone (ceil against floor of 3000/160)
        assertEquals(18, new WhisperLogMel().valid(pcm, AudioPreset.QWEN3_OMNI).frames());
    }

    @Test
    void qwen3OmniInABatchPadsTheShorterClipToTheLongest() throws IOException {
        // make_fixtures.py checked that the extractor, given this clip and a 5000-sample one under padding=True,
        // gives the clip the same 19 masked frames as Qwen2-Audio's padding: compute() with the batch's length
        float[] pcm = Fixtures.clip();
        Npy.Array ref = Fixtures.npy("qwen2_valid.npy");
        var f = new WhisperLogMel().compute(pcm, pcm.length, 5000, AudioPreset.maskFrames(pcm.length, 5000));
        assertEquals(19, f.frames());
        assertArrayEquals(f.values(), new WhisperLogMel().valid(pcm, AudioPreset.QWEN3_OMNI, 5000).values());
        assertEquals(19, AudioPreset.QWEN3_OMNI.melFrames(pcm.length, 5000));
        assertEquals(18, AudioPreset.QWEN3_OMNI.melFrames(pcm.length, pcm.length));
        assertEquals(19, AudioPreset.QWEN2_AUDIO.melFrames(pcm.length, 5000));
        double d = maxDiff(ref.asFloats(), ref.shape(), f);
        assertTrue(d <= TOLERANCE, "max |Δ| " + d);
    }

    @Test
    void qwen2AudioPaddedModeIsTheProcessorsWholeArray() throws IOException {
        float[] pcm = Fixtures.clip();
        var meta = Fixtures.meta();
        Npy.Array head = Fixtures.npy("qwen2_padded_head.npy");
        var f = new WhisperLogMel().hfPadded(pcm, AudioPreset.QWEN2_AUDIO);
        assertEquals(meta.get("qwen2_padded_frames").asInt(), f.frames());
        assertEquals(19, f.validFrames());
        int[] mask = f.attentionMask();
        assertEquals(3000, mask.length);
        assertEquals(19, java.util.Arrays.stream(mask).sum());
        assertEquals(1, mask[18]);
        assertEquals(0, mask[19]);
        float[] h = head.asFloats();
        int headFrames = (int) head.shape()[1];
        double d = 0;
        for (int m = 0; m < 128; m++)
            for (int i = 0; i < headFrames; i++) d = Math.max(d, Math.abs(h[m * headFrames + i] - f.get(m, i)));
        assertTrue(d <= TOLERANCE, "head max |Δ| " + d);
        float tail = (float) meta.get("qwen2_padded_tail_value").asDouble();
        for (int m = 0; m < 128; m++)
            for (int i = headFrames; i < f.frames(); i++) assertEquals(tail, f.get(m, i), "frame " + i + " mel " + m);
        // the valid mode is the padded array's first validFrames columns, value for value
        var v = new WhisperLogMel().valid(pcm, AudioPreset.QWEN2_AUDIO);
        for (int m = 0; m < 128; m++)
            for (int i = 0; i < v.frames(); i++) assertEquals(f.get(m, i), v.get(m, i));
    }

    @Test
    void qwen25OmniPadsToThreeHundredSecondsAndServesTheSameValidFrames() throws IOException {
        float[] pcm = Fixtures.clip();
        var lm = new WhisperLogMel();
        var padded = lm.hfPadded(pcm, AudioPreset.QWEN2_5_OMNI);
        assertEquals(30_000, padded.frames());
        assertEquals(15_360_000L, padded.bytes());
        var valid = lm.valid(pcm, AudioPreset.QWEN2_5_OMNI);
        assertEquals(19, valid.frames());
        // same zero tail as Qwen2-Audio's: only the padded length differs, and the padding never holds the maximum
        assertArrayEquals(lm.valid(pcm, AudioPreset.QWEN2_AUDIO).values(), valid.values());
    }

    @Test
    void tenSecondsServedAreAThirtiethOfWhatQwen25OmniPads() {
        float[] pcm = new float[160_000];
        for (int i = 0; i < pcm.length; i++) pcm[i] = (float) Math.sin(i * 0.05) * 0.3f;
        var lm = new WhisperLogMel();
        var valid = lm.valid(pcm, AudioPreset.QWEN2_5_OMNI);
        assertEquals(1000, valid.frames());
        assertEquals(512_000, valid.bytes());
        assertEquals(1000, AudioPreset.QWEN2_5_OMNI.melFramesForSeconds(10.0));
        var padded = lm.hfPadded(pcm, AudioPreset.QWEN2_5_OMNI);
        assertEquals(15_360_000, padded.bytes());
        assertEquals(30.0, (double) padded.bytes() / valid.bytes());
        for (int m = 0; m < 128; m += 17)
            for (int i = 0; i < 1000; i += 37) assertEquals(padded.get(m, i), valid.get(m, i));
    }

    @Test
    void aClipShorterThanOneHopHasNoFrameAlone() {
        var e = assertThrows(IllegalArgumentException.class,
                () -> new WhisperLogMel().valid(new float[100], AudioPreset.QWEN3_OMNI));
        assertTrue(e.getMessage().contains("no frame"), e.getMessage());
        // padded by the processor it has one valid frame
        assertEquals(1, new WhisperLogMel().valid(new float[100], AudioPreset.QWEN2_AUDIO).frames());
    }

    @Test
    void reflectPaddingIsNumpys() {
        assertEquals(1, WhisperLogMel.reflect(-1, 5));
        assertEquals(3, WhisperLogMel.reflect(5, 5));
        assertEquals(2, WhisperLogMel.reflect(-6, 5)); // repeated: -6 → 6 → 2
        assertEquals(0, WhisperLogMel.reflect(-3, 1));
    }
}
