package dev.stoker.encode.batch;

import dev.stoker.core.VisionConfig;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.image.RgbImage;
import dev.stoker.image.qwenvl.ImageBackend;
import dev.stoker.image.qwenvl.QwenVlImageTransform;
import dev.stoker.text.QwenTokenIds;
import java.util.Arrays;

/**
 * The image a rank's batch without any image gets under {@link TextOnlyPolicy#DUMMY_IMAGE}, so that every rank runs
 * the vision tower (Hugging Face's fails on an empty {@code pixel_values}, and under FSDP or ZeRO-3 a rank that skips
 * it hangs the job). It follows LLaMA-Factory's fake image ({@code MultiModalDataCollatorForSeq2Seq}): a white
 * {@value #SIDE}×{@value #SIDE} RGB image through the job's own transform (smart_resize within its pixel bounds, its
 * patch, merge and temporal sizes, mean and std), whose tokens — {@code <|vision_start|>}, one {@code <|image_pad|>}
 * per merged patch, {@code <|vision_end|>} — are appended after the first sample's last token with label −100,
 * attention 0 and the padding's position in all three M-RoPE rows (what Hugging Face's {@code get_rope_index} leaves at
 * tokens of attention 0, and what Stoker pads with: 1, or 0 for transformers 5.3 and later,
 * {@link dev.stoker.encode.EncodeOptions.InputContract#positionPad()}); under that contract its image pads are 1 in
 * {@code mm_token_type_ids}, as the processor marks every image pad. Its pixels are the batch's only {@code pixel_values} (or
 * {@code pixel_values_u8}) and its grid the only {@code image_grid_thw} row.
 *
 * <p>Nothing attends to the dummy tokens and none has a label, so the loss and every other token's inputs are those
 * of the batch without it; the model's check that image tokens and image features agree in number holds. The dummy
 * is not a sample: {@code samples}, {@code sample_index}, the ledger's accounting and the errors never count it. A batch
 * of no sample at all (every one skipped) is left empty: there is no row to append to.
 *
 * <p>Threading: immutable; the arrays are never handed out for writing.
 */
public final class DummyImage {
    /** The side of LLaMA-Factory's fake image, in pixels. */
    public static final int SIDE = 64;
    /** Its colour: white, in every channel. */
    public static final byte WHITE = (byte) 255;

    private final long[] tokens;
    private final long[] gridThw;
    private final float[] pixelValues;
    private final byte[] pixelsU8;
    private final int rowLength;

    private DummyImage(long[] tokens, long[] gridThw, float[] pixelValues, byte[] pixelsU8, int rowLength) {
        this.tokens = tokens;
        this.gridThw = gridThw;
        this.pixelValues = pixelValues;
        this.pixelsU8 = pixelsU8;
        this.rowLength = rowLength;
    }

    /** The dummy of a job whose images are processed with {@code vision}. */
    public static DummyImage of(VisionConfig vision) {
        return of(vision, ImageBackend.PIL);
    }

    /** The dummy of a job whose images are processed with {@code vision} by {@code backend}'s image processor. */
    public static DummyImage of(VisionConfig vision, ImageBackend backend) {
        var transform = new QwenVlImageTransform(vision, backend);
        var plan = transform.plan(SIDE, SIDE);
        byte[] rgb = new byte[SIDE * SIDE * 3];
        Arrays.fill(rgb, WHITE);
        var white = new RgbImage(SIDE, SIDE, rgb);
        float[] pixels = new float[Math.toIntExact(plan.floatCount())];
        transform.writePixelValues(white, plan, pixels, 0);
        byte[] u8 = new byte[Math.toIntExact(plan.resizedByteSize())];
        transform.writeResized(white, plan, u8, 0);
        long[] tokens = new long[plan.tokenCount() + 2];
        Arrays.fill(tokens, QwenTokenIds.IMAGE_PAD);
        tokens[0] = QwenTokenIds.VISION_START;
        tokens[tokens.length - 1] = QwenTokenIds.VISION_END;
        return new DummyImage(tokens, plan.gridThw(), pixels, u8, plan.rowLength());
    }

    /** The dummy of {@code policy}, or null when batches get none (ALLOW). */
    public static DummyImage forPolicy(TextOnlyPolicy policy, VisionConfig vision) {
        return forPolicy(policy, vision, ImageBackend.PIL);
    }

    /** As {@link #forPolicy(TextOnlyPolicy, VisionConfig)}, the dummy processed by {@code backend}'s image processor. */
    public static DummyImage forPolicy(TextOnlyPolicy policy, VisionConfig vision, ImageBackend backend) {
        return policy == TextOnlyPolicy.DUMMY_IMAGE ? of(vision, backend) : null;
    }

    /** Whether a batch of {@code samples} samples and {@code images} images gets the dummy: some sample, no image. */
    public static boolean needed(DummyImage dummy, int samples, int images) { return dummy != null && samples > 0 && images == 0; }

    /** The token ids appended to the first sample: vision start, the image pads, vision end. */
    public long[] tokens() { return tokens.clone(); }

    /** Tokens appended to the first sample. */
    public int tokenCount() { return tokens.length; }

    /** Its {@code image_grid_thw} row (t, h, w). */
    public long[] gridThw() { return gridThw.clone(); }

    /** Its {@code pixel_values} rows, t·h·w. */
    public int rows() { return pixelValues.length / rowLength; }

    /** Its float32 {@code pixel_values}, rows × row length. */
    public float[] pixelValues() { return pixelValues.clone(); }

    /** Its resized u8 RGB pixels (HWC), the compact format's {@code pixel_values_u8}. */
    public byte[] pixelsU8() { return pixelsU8.clone(); }

    /** Bytes of its pixel tensor in {@code format}. */
    public long pixelBytes(PixelFormat format) { return format == PixelFormat.UINT8 ? pixelsU8.length : (long) pixelValues.length * Float.BYTES; }

    /** The shape of {@code shape} (a batch without images) with the dummy: its tokens after the first sample's {@code firstLength}. */
    public BatchShape addTo(BatchShape shape, int firstLength) {
        if (shape.samples() == 0 || shape.images() != 0) throw new IllegalArgumentException("the dummy image goes into a batch of samples without images: " + shape);
        return shape.withOneImage(Math.max(shape.length(), firstLength + tokens.length), rows(), rowLength, pixelsU8.length);
    }

    /** Writes its pixels in {@code format} into {@code dst} at {@code offsetBytes} (little-endian float32, or the u8 bytes). */
    public void writePixels(PixelFormat format, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        if (format == PixelFormat.UINT8) java.lang.foreign.MemorySegment.copy(pixelsU8, 0, dst, java.lang.foreign.ValueLayout.JAVA_BYTE, offsetBytes, pixelsU8.length);
        else java.lang.foreign.MemorySegment.copy(pixelValues, 0, dst, dev.stoker.core.batch.BatchLayout.FLOAT_LE, offsetBytes, pixelValues.length);
    }
}
