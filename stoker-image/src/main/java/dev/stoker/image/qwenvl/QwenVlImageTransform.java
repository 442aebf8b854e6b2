package dev.stoker.image.qwenvl;

import dev.stoker.core.VisionConfig;
import dev.stoker.image.RgbImage;
import dev.stoker.image.torch.TorchBicubicU8Resizer;
import java.lang.foreign.MemorySegment;

/**
 * The Qwen-VL image processor (spec §4–§7): smart_resize plan, Pillow-exact bicubic resize, then fused
 * normalize + patchify into {@code pixel_values}, bit-identical to the HF slow/PIL processor; or, with
 * {@link ImageBackend#TORCHVISION}, bit-identical to the torchvision ("fast") processor: the same plan, torchvision's
 * uint8 antialiased bicubic ({@link TorchBicubicU8Resizer}) and the fused normalize of
 * {@link PatchWriter#fusedNormalizationTable(VisionConfig)}.
 *
 * <p>Planning is separate from pixel work so that a batch can be laid out (rows per image, byte offsets)
 * before any image is resized, and each image written once, in place. The plan is computed from the
 * original image size; the image handed to {@code apply}/{@code writePixelValues} may be smaller (a JPEG
 * decoded with DCT scaling) and is resized from whatever size it has to the plan's target.
 *
 * <p>Threading: not thread-safe (reusable scratch buffers); use one instance per thread.
 */
public final class QwenVlImageTransform {
    private final VisionConfig config;
    private final ImageBackend backend;
    private final BicubicResizer resizer;
    private final TorchBicubicU8Resizer torchResizer;
    private final PatchWriter patchWriter;
    private byte[] resized = new byte[0];

    /**
     * The target geometry of one image.
     *
     * @param srcHeight     height of the original image the plan was made for
     * @param srcWidth      width of the original image
     * @param resizedHeight smart_resize height, a multiple of p·m
     * @param resizedWidth  smart_resize width, a multiple of p·m
     * @param gridT         temporal patches (1 for an image)
     * @param gridH         patch rows: resizedHeight / p
     * @param gridW         patch columns: resizedWidth / p
     * @param rowLength     floats per pixel_values row: 3·tps·p·p
     * @param mergeSize     m
     */
    public record Plan(int srcHeight, int srcWidth, int resizedHeight, int resizedWidth,
                       int gridT, int gridH, int gridW, int rowLength, int mergeSize) {
        /** pixel_values rows: t·gh·gw. */
        public int rows() { return gridT * gridH * gridW; }

        /** Number of floats of pixel_values. */
        public long floatCount() { return (long) rows() * rowLength; }

        /** Bytes of pixel_values as float32. */
        public long byteSize() { return floatCount() * Float.BYTES; }

        /** Bytes of the resized image as u8 RGB (HWC), the compact wire format's pixels: 8× less than {@link #byteSize()} for t = 2. */
        public long resizedByteSize() { return (long) resizedHeight * resizedWidth * 3; }

        /** LLM image tokens: t·gh·gw / m². */
        public int tokenCount() { return rows() / (mergeSize * mergeSize); }

        public long[] gridThw() { return new long[] {gridT, gridH, gridW}; }
    }

    /** The PIL backend's transform (what Stoker did before the torchvision backend existed). */
    public QwenVlImageTransform(VisionConfig config) {
        this(config, ImageBackend.PIL);
    }

    public QwenVlImageTransform(VisionConfig config, ImageBackend backend) {
        this.config = config;
        this.backend = java.util.Objects.requireNonNull(backend, "backend");
        this.resizer = backend == ImageBackend.PIL ? new BicubicResizer() : null;
        this.torchResizer = backend == ImageBackend.TORCHVISION ? new TorchBicubicU8Resizer() : null;
        this.patchWriter = new PatchWriter(config, backend);
    }

    public VisionConfig config() { return config; }

    public ImageBackend backend() { return backend; }

    /**
     * Plans the resize of a {@code srcHeight × srcWidth} image.
     *
     * @throws dev.stoker.core.SampleException (TRANSFORM) when smart_resize rejects the size
     */
    public Plan plan(int srcHeight, int srcWidth) {
        int[] hw = SmartResize.compute(srcHeight, srcWidth, config);
        int p = config.patchSize();
        return new Plan(srcHeight, srcWidth, hw[0], hw[1], 1, hw[0] / p, hw[1] / p, config.rowLength(), config.mergeSize());
    }

    /** Plans for the image's own size and applies. */
    public ImageFeatures apply(RgbImage img) {
        return apply(img, plan(img.height(), img.width()));
    }

    /** Resizes {@code img} to the plan's target and returns newly allocated pixel_values and grid. */
    public ImageFeatures apply(RgbImage img, Plan plan) {
        float[] out = new float[Math.toIntExact(plan.floatCount())];
        byte[] rgb = resizeToPlan(img, plan);
        patchWriter.write(rgb, plan.resizedWidth(), plan.resizedHeight(), out, 0);
        return new ImageFeatures(out, plan.gridThw(), plan.rowLength());
    }

    /** Writes the image's pixel_values (little-endian float32, {@link Plan#byteSize()} bytes) into {@code dst} at {@code offsetBytes}. */
    public void writePixelValues(RgbImage img, Plan plan, MemorySegment dst, long offsetBytes) {
        byte[] rgb = resizeToPlan(img, plan);
        patchWriter.write(rgb, plan.resizedWidth(), plan.resizedHeight(), dst, offsetBytes);
    }

    /** Writes the image's pixel_values into {@code dst} from float index {@code offset}. */
    public void writePixelValues(RgbImage img, Plan plan, float[] dst, int offset) {
        byte[] rgb = resizeToPlan(img, plan);
        patchWriter.write(rgb, plan.resizedWidth(), plan.resizedHeight(), dst, offset);
    }

    /**
     * Writes the image resized to the plan's target as u8 RGB, HWC ({@link Plan#resizedByteSize()} bytes), into
     * {@code dst} at {@code offsetBytes}: the compact wire format, normalized and patchified by the trainer
     * ({@link CompactPixels}).
     */
    public void writeResized(RgbImage img, Plan plan, MemorySegment dst, long offsetBytes) {
        byte[] rgb = resizeToPlan(img, plan);
        MemorySegment.copy(rgb, 0, dst, java.lang.foreign.ValueLayout.JAVA_BYTE, offsetBytes, Math.toIntExact(plan.resizedByteSize()));
    }

    /** Writes the image resized to the plan's target as u8 RGB, HWC, into {@code dst} from index {@code offset}. */
    public void writeResized(RgbImage img, Plan plan, byte[] dst, int offset) {
        byte[] rgb = resizeToPlan(img, plan);
        System.arraycopy(rgb, 0, dst, offset, Math.toIntExact(plan.resizedByteSize()));
    }

    /** The resized u8 image of a plan (a copy; the hot paths use an internal buffer). */
    public RgbImage resized(RgbImage img, Plan plan) {
        byte[] out = new byte[Math.toIntExact(plan.resizedByteSize())];
        resize(img, out, plan.resizedWidth(), plan.resizedHeight());
        return new RgbImage(plan.resizedWidth(), plan.resizedHeight(), out);
    }

    /**
     * The image resized to the plan's target as u8 RGB, HWC, in this transform's scratch buffer (valid until its next
     * call; the buffer may be longer than {@link Plan#resizedByteSize()}): what the cache of preprocessed samples stores,
     * and what {@link #writePixelValues} patchifies without resizing again when handed back.
     */
    public RgbImage resizedView(RgbImage img, Plan plan) {
        return new RgbImage(plan.resizedWidth(), plan.resizedHeight(), resizeToPlan(img, plan));
    }

    private void resize(RgbImage img, byte[] dst, int w, int h) {
        if (resizer != null) resizer.resize(img.data(), img.width(), img.height(), dst, w, h);
        else torchResizer.resize(img.data(), img.width(), img.height(), dst, w, h);
    }

    private byte[] resizeToPlan(RgbImage img, Plan plan) {
        if (plan.rowLength() != config.rowLength())
            throw new IllegalArgumentException("plan was made for another configuration (row length " + plan.rowLength() + ")");
        int w = plan.resizedWidth();
        int h = plan.resizedHeight();
        if (img.width() == w && img.height() == h) return img.data();
        int needed = w * h * 3;
        if (resized.length < needed) resized = new byte[needed];
        resize(img, resized, w, h);
        return resized;
    }
}
