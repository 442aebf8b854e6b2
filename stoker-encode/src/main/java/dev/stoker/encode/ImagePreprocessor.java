package dev.stoker.encode;

import dev.stoker.core.SampleException;
import dev.stoker.image.RgbImage;
import dev.stoker.image.decode.DecodeOptions;
import dev.stoker.image.decode.ExifPolicy;
import dev.stoker.image.decode.ImageDecoder;
import dev.stoker.image.decode.ImageDecoders;
import dev.stoker.image.decode.ImageFormat;
import dev.stoker.image.decode.ImageInfo;
import dev.stoker.image.qwenvl.ImageFeatures;
import dev.stoker.image.qwenvl.QwenVlImageTransform;

/**
 * The image half of a sample, in two steps so that the token count is known before any pixel is
 * decoded: {@link #plan} reads the header and computes the resize target and grid;
 * {@link #process} decodes (DCT-scaled when allowed), resizes, normalizes and patchifies (or, for the
 * compact wire format, {@link #processResizedInto} stops after the resize).
 *
 * <p>Threading: one instance per thread (it holds that thread's decoder and resize buffers).
 */
public final class ImagePreprocessor {
    /** An image whose header was read and whose output geometry is known. */
    public record Planned(String name, byte[] bytes, ImageInfo info, QwenVlImageTransform.Plan plan) {
        public long[] gridThw() { return plan.gridThw(); }
    }

    private final EncodeOptions options;
    private final ImageDecoder decoder;
    private final QwenVlImageTransform transform;
    private final DecodeOptions decodeOptions;
    /** Time spent decoding and transforming since the last {@link #resetTimes()} (stage metrics). */
    private long decodeNanos, transformNanos;

    public ImagePreprocessor(EncodeOptions options) {
        this(options, ImageDecoders.forCurrentThread());
    }

    public ImagePreprocessor(EncodeOptions options, ImageDecoder decoder) {
        this.options = options;
        this.decoder = decoder;
        this.transform = new QwenVlImageTransform(options.vision(), options.imageBackend());
        this.decodeOptions = new DecodeOptions(options.exif(), options.maxSourcePixels(), 1,
                options.decodeMemoryBytes(Runtime.getRuntime().availableProcessors()));
    }

    /** The decode memory budget of this thread's images ({@link EncodeOptions#decodeMemoryBytes()}, resolved). */
    public long decodeMemoryBytes() { return decodeOptions.maxDecodeBytes(); }

    /**
     * Header, pixel limit, smart_resize and the decode memory budget (what decoding would take, from the header): a
     * SampleException names {@code name} and the cause. Refusing here, before the sample's tokens and its batch's
     * memory, keeps the budget's verdict the same in every mode and in {@code validate}.
     */
    public Planned plan(byte[] bytes, String name) {
        ImageInfo info = decoder.probe(bytes, name);
        if (info.pixelCount() > options.maxSourcePixels())
            throw new SampleException(name, SampleException.Stage.DECODE, "image of " + info.width() + "x" + info.height()
                    + " = " + info.pixelCount() + " pixels exceeds the limit of " + options.maxSourcePixels());
        boolean rotate = options.exif() == ExifPolicy.APPLY;
        int h = rotate ? info.orientedHeight() : info.height();
        int w = rotate ? info.orientedWidth() : info.width();
        Planned planned;
        try {
            planned = new Planned(name, bytes, info, transform.plan(h, w));
        } catch (SampleException e) {
            throw e.withSampleId(name);
        }
        long need = decoder.decodeBytes(bytes, name, decodeOptions.withScale(scaleFor(planned)));
        if (need > decodeOptions.maxDecodeBytes())
            throw new SampleException(name, SampleException.Stage.DECODE, "over the decode memory budget: " + info.format() + " of "
                    + info.width() + "x" + info.height() + " needs about " + need + " bytes to decode, more than the "
                    + decodeOptions.maxDecodeBytes() + " bytes allowed per thread (--decode-memory)");
        return planned;
    }

    public ImageFeatures process(Planned img) {
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scaleFor(img)));
        try {
            return transform.apply(rgb, img.plan());
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        }
    }

    /** Decodes and transforms {@code img}, writing its pixel_values rows into {@code dst} at {@code offset} (floats). */
    public void processInto(Planned img, float[] dst, int offset) {
        long t0 = System.nanoTime();
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scaleFor(img)));
        long t1 = System.nanoTime();
        decodeNanos += t1 - t0;
        try {
            transform.writePixelValues(rgb, img.plan(), dst, offset);
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        } finally {
            transformNanos += System.nanoTime() - t1;
        }
    }

    /** An OutOfMemoryError while resizing or patchifying one image: that image's error, not the thread's end. */
    private static SampleException outOfMemory(Planned img, OutOfMemoryError e) {
        return new SampleException(img.name(), SampleException.Stage.TRANSFORM, "out of memory: " + e.getMessage(), e);
    }

    public long decodeNanos() { return decodeNanos; }

    public long transformNanos() { return transformNanos; }

    public void resetTimes() { decodeNanos = transformNanos = 0; }

    /**
     * Decodes and transforms {@code img}, writing its pixel_values rows (little-endian float32) into
     * {@code dst} at byte {@code offsetBytes}: the batch segment itself, so no copy follows.
     */
    public void processInto(Planned img, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        long t0 = System.nanoTime();
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scaleFor(img)));
        long t1 = System.nanoTime();
        decodeNanos += t1 - t0;
        try {
            transform.writePixelValues(rgb, img.plan(), dst, offsetBytes);
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        } finally {
            transformNanos += System.nanoTime() - t1;
        }
    }

    /**
     * Decodes and resizes {@code img}, writing the resized u8 RGB pixels ({@code plan().resizedByteSize()}
     * bytes, HWC) into {@code dst} at byte {@code offsetBytes}: the compact wire format, in place.
     */
    public void processResizedInto(Planned img, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        long t0 = System.nanoTime();
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scaleFor(img)));
        long t1 = System.nanoTime();
        decodeNanos += t1 - t0;
        try {
            transform.writeResized(rgb, img.plan(), dst, offsetBytes);
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        } finally {
            transformNanos += System.nanoTime() - t1;
        }
    }

    /** {@link #processResizedInto(Planned, java.lang.foreign.MemorySegment, long)} into a heap array from index {@code offset}. */
    public void processResizedInto(Planned img, byte[] dst, int offset) {
        long t0 = System.nanoTime();
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scaleFor(img)));
        long t1 = System.nanoTime();
        decodeNanos += t1 - t0;
        try {
            transform.writeResized(rgb, img.plan(), dst, offset);
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        } finally {
            transformNanos += System.nanoTime() - t1;
        }
    }

    /** Both steps at once (the {@code preprocess} command). */
    public ImageFeatures process(byte[] bytes, String name) {
        return process(plan(bytes, name));
    }

    /**
     * The DCT scale Pillow's {@code draft("RGB", target)} would pick: the largest d in {8,4,2,1}
     * with d ≤ min(stored w / target w, stored h / target h), computed in stored orientation.
     */
    private int scaleFor(Planned img) {
        if (options.decodeScale() == EncodeOptions.DecodeScale.OFF || img.info().format() != ImageFormat.JPEG
                || !ImageDecoders.turboJpegAvailable())
            return 1;
        boolean swapped = options.exif() == ExifPolicy.APPLY && img.info().exifOrientation() >= 5;
        int targetW = swapped ? img.plan().resizedHeight() : img.plan().resizedWidth();
        int targetH = swapped ? img.plan().resizedWidth() : img.plan().resizedHeight();
        int scale = Math.min(img.info().width() / targetW, img.info().height() / targetH);
        for (int d : new int[] {8, 4, 2}) if (scale >= d) return d;
        return 1;
    }
}
