package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.audio.AudioEncoding;
import dev.stoker.encode.audio.AudioTensors;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.schedule.ScheduledBatch;
import java.lang.foreign.Arena;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The pack layouts of Qwen2-Audio and Qwen3-Omni (issue 32, docs/packing.md "Audio packs") on hand-made samples:
 * Qwen2-Audio's int64 (1, T) — each segment's own row, the tail pad 0..p−1 — and Qwen3-Omni's float32 (4, 1, T) — row 0
 * each segment's 0..L−1, rows 1–3 its float positions bit for bit (fractional ones included), the tail pad 0..p−1 in
 * every row; the clips stacked segment after segment; the dummy image only where the family's model takes one.
 */
@Timeout(60)
class AudioPackAssemblerTest {
    private static final long P = BatchAssembler.PAD_TOKEN_ID, I = BatchAssembler.IGNORE_INDEX, AUDIO = 151646;
    private static final EncodeOptions QWEN2_AUDIO = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 50176)
            .withAudio(new AudioEncoding(AudioPreset.QWEN2_AUDIO, AudioEncoding.Pad.VALID));
    private static final EncodeOptions QWEN3_OMNI = EncodeOptions.defaults(ProcessorPreset.QWEN3_VL).withPixels(3136, 50176)
            .withAudio(new AudioEncoding(AudioPreset.QWEN3_OMNI, AudioEncoding.Pad.VALID));

    /** A planned pack of {@code size} samples for rank 1, the planner's dummy flag {@code dummy}. */
    private static ScheduledBatch scheduled(int size, boolean dummy) {
        var cursor = new ScheduleCursor(0, 4);
        var plan = new PackedStep(cursor, new ScheduleCursor(0, 4 + size), 2, new int[][] {new int[0], new int[size]}, new double[2],
                new int[2], new int[2], new boolean[] {false, dummy}, new int[0], new int[0]);
        return new ScheduledBatch(cursor, 0, 2, 1, new int[size], null, plan);
    }

    /** One clip of {@code frames} frames whose every value is {@code tag}. */
    private static AudioTensors clip(int frames, float tag) {
        float[] f = new float[AudioPreset.MEL_BINS * frames];
        Arrays.fill(f, tag);
        int[] mask = new int[frames];
        Arrays.fill(mask, 1);
        return new AudioTensors(f, 1, frames, mask);
    }

    /** A Qwen2-Audio sample: its one row of positions 0..L−1, and {@code audio} (null: text only). */
    private static EncodedSample qwen2Audio(String id, long[] ids, long[] labels, AudioTensors audio) {
        long[] pos = new long[ids.length];
        for (int k = 0; k < pos.length; k++) pos[k] = k;
        return new EncodedSample(id, ids, labels, new long[ids.length], pos, new float[0], 1176, new long[0], 0, null, null, audio);
    }

    /** A Qwen3-Omni sample: float (3, L) positions base + row + 0.5·position (fractional), and {@code audio}. */
    private static EncodedSample qwen3Omni(String id, long[] ids, long[] labels, float base, AudioTensors audio) {
        int n = ids.length;
        float[] pos = new float[3 * n];
        for (int r = 0; r < 3; r++) for (int k = 0; k < n; k++) pos[r * n + k] = base + r + 0.5f * k;
        return new EncodedSample(id, ids, labels, new long[n], new long[0], new float[0], 1536, new long[0], 0, null, null, audio)
                .withFloatPositions(pos);
    }

    private static BatchLayout.Batch laid(Batch b, EncodeOptions options) {
        var prepared = BatchSchema.tensors(b, 2, options.vision());
        var dst = Arena.ofAuto().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
        BatchLayout.write(prepared.meta(), prepared.tensors(), dst);
        return BatchLayout.read(dst);
    }

    @Test
    void qwen2AudiosPackHasOneRowOfEachSegmentsOwnPositionsAndNeverADummy() {
        var a = qwen2Audio("a", new long[] {1, AUDIO, AUDIO, 4}, new long[] {I, I, I, 4}, clip(3, 7f));
        var t = qwen2Audio("t", new long[] {10, 11, 12}, new long[] {I, 11, 12}, null);
        var b = qwen2Audio("b", new long[] {20, AUDIO, 22}, new long[] {I, I, 22}, clip(5, 9f));
        // the planner's dummy flag set: Qwen2-Audio has no vision tower, so no dummy segment all the same
        var pack = new PackAssembler(QWEN2_AUDIO, 8).assemble(scheduled(3, true), new int[] {3, 0, 6}, List.of(a, t, b), List.of());
        assertEquals(3, pack.shape().segments(), "no dummy segment");
        assertEquals(BatchShape.Positions.TEXT, pack.shape().positions());
        assertEquals(16, pack.length(), "10 tokens padded to 16");
        assertArrayEquals(new long[] {0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5}, pack.positionIds(), "each segment's row, then the pad's");
        assertNull(pack.floatPositionIds());
        assertArrayEquals(new long[] {1, AUDIO, AUDIO, 4, 10, 11, 12, 20, AUDIO, 22, P, P, P, P, P, P}, pack.inputIds());
        var layout = laid(pack, QWEN2_AUDIO);
        var pos = layout.tensor("position_ids");
        assertEquals(Tensor.DType.INT64, pos.dtype());
        assertArrayEquals(new long[] {1, 16}, pos.shape());
        assertArrayEquals(pack.positionIds(), pos.toLongs());
        assertEquals(List.of("input_ids", "labels", "position_ids", "input_features", "feature_attention_mask"),
                layout.inputs().stream().map(Tensor::name).toList());
        var features = layout.tensor("input_features");
        assertArrayEquals(new long[] {2, AudioPreset.MEL_BINS, 5}, features.shape(), "a's and b's clips, b's 5 frames wide");
        assertArrayEquals(new int[] {1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, layout.tensor("feature_attention_mask").toInts());
        assertArrayEquals(new long[] {3, 0, 6}, layout.sampleIndex());
        assertArrayEquals(new int[] {0, 4, 7, 10}, layout.tensor("cu_seqlens").toInts());
    }

    @Test
    void qwen3OmnisPackHasFourFloatRowsEachSegmentsOwnBitForBit() {
        var a = qwen3Omni("a", new long[] {1, AUDIO, AUDIO, 4}, new long[] {I, I, I, 4}, 0f, clip(2, 3f));
        var b = qwen3Omni("b", new long[] {20, 21, 22}, new long[] {I, 21, 22}, 100f, null);
        // the default text-only policy gives its text-only pack the dummy image, as its padded batches get it
        assertEquals(3, new PackAssembler(QWEN3_OMNI, 4).assemble(scheduled(2, false), new int[] {1, 2}, List.of(a, b), List.of())
                .shape().segments(), "the dummy by the text-only policy");
        var packer = new PackAssembler(QWEN3_OMNI.withTextOnly(EncodeOptions.TextOnlyPolicy.ALLOW), 4);
        var pack = packer.assemble(scheduled(2, false), new int[] {1, 2}, List.of(a, b), List.of());
        assertEquals(2, pack.shape().segments(), "--text-only allow: no dummy unless the planner asks");
        assertEquals(BatchShape.Positions.MROPE_FLOAT, pack.shape().positions());
        int t = 8;
        assertEquals(t, pack.length());
        assertEquals(0, pack.positionIds().length);
        float[] want = new float[4 * t];
        float[] row0 = {0, 1, 2, 3, 0, 1, 2, 0};
        System.arraycopy(row0, 0, want, 0, t);
        for (int r = 0; r < 3; r++) {
            for (int k = 0; k < 4; k++) want[(r + 1) * t + k] = r + 0.5f * k;
            for (int k = 0; k < 3; k++) want[(r + 1) * t + 4 + k] = 100 + r + 0.5f * k;
            want[(r + 1) * t + 7] = 0; // the tail pad: 0..p−1 in every row
        }
        assertArrayEquals(want, pack.floatPositionIds());
        var pos = laid(pack, QWEN3_OMNI).tensor("position_ids");
        assertEquals(Tensor.DType.FLOAT32, pos.dtype());
        assertArrayEquals(new long[] {4, 1, t}, pos.shape());
        float[] got = new float[4 * t];
        pos.data().asByteBuffer().order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(got);
        assertArrayEquals(want, got);

        // the planner's word (another rank's pack runs the vision tower): the dummy image last, its positions as floats
        var withDummy = packer.assemble(scheduled(1, true), new int[] {2}, List.of(b), List.of());
        assertEquals(2, withDummy.shape().segments());
        assertEquals(1, withDummy.shape().images());
        long[] dummy = packer.dummyPositionIds();
        int d = dummy.length / 3, tt = withDummy.length();
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < d; k++)
                assertEquals(dummy[r * d + k], withDummy.floatPositionIds()[(r + 1) * tt + 3 + k], "dummy row " + (r + 1) + " at " + k);
        for (int k = 0; k < d; k++) assertEquals(k, withDummy.floatPositionIds()[3 + k], "the dummy's row 0");
    }

    @Test
    void aSampleOfAnotherLayoutIsRefusedByName() {
        var text = qwen2Audio("odd-one", new long[] {1, 2}, new long[] {I, 2}, null);
        var e = assertThrows(IllegalArgumentException.class,
                () -> new PackAssembler(QWEN3_OMNI, 1).assemble(scheduled(1, false), new int[] {0}, List.of(text), List.of()));
        assertTrue(e.getMessage().contains("TEXT position_ids in a pack of MROPE_FLOAT"), e.getMessage());
    }
}
