package dev.stoker.image.qwenvl;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

/**
 * {@link VideoPatchWriter}'s fused normalize of one patch line with the JDK's Vector API (use only when
 * {@link #usable(int)}): the {@code p} pixels of one image row of a patch, {@code 3p} interleaved RGB bytes, become the
 * {@code p} floats of each channel. The value of a byte {@code v} of channel {@code c} is {@code ((float) v − m[c]) / s[c]}
 * with the float {@code m} and {@code s} of {@link PatchWriter#fusedNormalizationTable}, computed lane by lane with the
 * same two float operations the table's entries were made with, so the values are bit-identical to the table's.
 *
 * <p>How: the line's first 48 bytes are read as three vectors of 16, widened to 16-lane floats and normalized in place
 * with per-lane constants (the channel of lane i of vector k is {@code (16k + i) mod 3}); then each channel's lanes are
 * gathered from the three with one permute of each and two blends (float permutes: AVX-512F, no byte permute needed) and stored under
 * a mask of {@code p} lanes. Needs 16 float lanes (AVX-512) and {@code p ≤ 16}; a line whose 48 bytes would run past the
 * frames is left to the scalar code.
 */
final class VectorPatchRow {
    private static final VectorSpecies<Float> F = FloatVector.SPECIES_512;
    private static final VectorSpecies<Integer> I = IntVector.SPECIES_512;
    private static final VectorSpecies<Byte> B = ByteVector.SPECIES_128;
    /** Bytes one line reads: three vectors of 16. */
    static final int READ_BYTES = 48;

    private final FloatVector[] mean = new FloatVector[3], std = new FloatVector[3];
    /** For channel c and vector k: the lane of vector k each output lane takes (0 where it takes another vector's). */
    private final VectorShuffle<Float>[][] pick;
    /** For channel c: the output lanes taken from vector 1, and those from vector 2 (the rest from vector 0). */
    private final VectorMask<Float>[] from1, from2;
    private final VectorMask<Float> store;

    /** Whether this JVM's preferred float vector has 16 lanes and a patch line of {@code patchSize} pixels fits one. */
    static boolean usable(int patchSize) {
        return FloatVector.SPECIES_PREFERRED.length() == F.length() && patchSize >= 1 && patchSize <= F.length();
    }

    @SuppressWarnings("unchecked")
    VectorPatchRow(float[] meanScaled, float[] stdScaled, int patchSize) {
        if (!usable(patchSize)) throw new IllegalStateException("no 16-lane float vectors here, or a patch of " + patchSize);
        for (int k = 0; k < 3; k++) {
            float[] m = new float[16], s = new float[16];
            for (int i = 0; i < 16; i++) {
                int c = (16 * k + i) % 3;
                m[i] = meanScaled[c];
                s[i] = stdScaled[c];
            }
            mean[k] = FloatVector.fromArray(F, m, 0);
            std[k] = FloatVector.fromArray(F, s, 0);
        }
        pick = new VectorShuffle[3][3];
        from1 = new VectorMask[3];
        from2 = new VectorMask[3];
        for (int c = 0; c < 3; c++) {
            int[][] lane = new int[3][16];
            boolean[] in1 = new boolean[16], in2 = new boolean[16];
            for (int x = 0; x < 16; x++) {
                int at = Math.min(3 * x + c, READ_BYTES - 1); // lanes past the patch read something, never stored
                lane[at / 16][x] = at % 16;
                in1[x] = at / 16 == 1;
                in2[x] = at / 16 == 2;
            }
            for (int k = 0; k < 3; k++) pick[c][k] = VectorShuffle.fromArray(F, lane[k], 0);
            from1[c] = VectorMask.fromArray(F, in1, 0);
            from2[c] = VectorMask.fromArray(F, in2, 0);
        }
        store = F.indexInRange(0, patchSize);
    }

    /**
     * Normalizes the line of {@code 3p} bytes at {@code frames[s]} ({@code s + READ_BYTES ≤ frames.length}) into
     * {@code out[o0 ..)}, {@code out[o1 ..)}, {@code out[o2 ..)} for channels 0, 1, 2, {@code p} floats each.
     */
    void line(byte[] frames, int s, float[] out, int o0, int o1, int o2) {
        FloatVector v0 = widen(frames, s).sub(mean[0]).div(std[0]);
        FloatVector v1 = widen(frames, s + 16).sub(mean[1]).div(std[1]);
        FloatVector v2 = widen(frames, s + 32).sub(mean[2]).div(std[2]);
        channel(0, v0, v1, v2).intoArray(out, o0, store);
        channel(1, v0, v1, v2).intoArray(out, o1, store);
        channel(2, v0, v1, v2).intoArray(out, o2, store);
    }

    private FloatVector channel(int c, FloatVector v0, FloatVector v1, FloatVector v2) {
        return v0.rearrange(pick[c][0]).blend(v1.rearrange(pick[c][1]), from1[c]).blend(v2.rearrange(pick[c][2]), from2[c]);
    }

    /** 16 bytes from {@code at}, unsigned, as 16 floats (exact: every byte value is a float). */
    private static FloatVector widen(byte[] frames, int at) {
        var bytes = ByteVector.fromArray(B, frames, at);
        return ((IntVector) bytes.convertShape(VectorOperators.ZERO_EXTEND_B2I, I, 0)).convert(VectorOperators.I2F, 0).reinterpretAsFloats();
    }
}
