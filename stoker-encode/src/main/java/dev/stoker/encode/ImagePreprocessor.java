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
    /** Time spent decoding, transforming and in the cache since the last {@link #resetTimes()} (stage metrics). */
    private long decodeNanos, transformNanos, cacheNanos;
    /** The cache of preprocessed samples; null: none. */
    private dev.stoker.encode.cache.PreprocessedCache cache;
    /** An image read back from the cache (reused: one image at a time per thread). */
    private byte[] cached = new byte[0];

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
        RgbImage rgb = source(img);
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
        RgbImage rgb = source(img);
        long t1 = System.nanoTime();
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

    /** Time spent reading and writing cache entries (keys, checks, zstd) since the last {@link #resetTimes()}. */
    public long cacheNanos() { return cacheNanos; }

    public void resetTimes() { decodeNanos = transformNanos = cacheNanos = 0; }

    /**
     * Reads and writes images' resized pixels through {@code cache} (null: none): an image whose entry is there is not
     * decoded nor resized, only normalized and patchified; an image decoded here is stored resized.
     */
    public void useCache(dev.stoker.encode.cache.PreprocessedCache cache) { this.cache = cache; }

    /**
     * The pixels {@code img}'s transform starts from: without a cache, the decoded image; with one, the image resized
     * to its plan's target (the transform then only normalizes and patchifies it), read from the cache or decoded,
     * resized and stored there. A read-back image lives in a buffer reused by the next call.
     */
    private RgbImage source(Planned img) {
        int scale = scaleFor(img);
        long t0 = System.nanoTime();
        if (cache == null) {
            try {
                return decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scale));
            } finally {
                decodeNanos += System.nanoTime() - t0;
            }
        }
        var plan = img.plan();
        var key = dev.stoker.encode.cache.PreprocessedCache.imageKey(options, dev.stoker.cache.CacheKey.sha256(img.bytes()),
                img.info().format(), plan.srcHeight(), plan.srcWidth(), plan.resizedHeight(), plan.resizedWidth(), scale);
        int n = Math.toIntExact(plan.resizedByteSize());
        if (cached.length < n) cached = new byte[n];
        boolean hit = cache.media().read(key, cached, 0, n);
        long t1 = System.nanoTime();
        cacheNanos += t1 - t0;
        if (hit) return new RgbImage(plan.resizedWidth(), plan.resizedHeight(), cached);
        RgbImage rgb = decoder.decode(img.bytes(), img.name(), decodeOptions.withScale(scale));
        long t2 = System.nanoTime();
        decodeNanos += t2 - t1;
        RgbImage resized;
        try {
            resized = transform.resizedView(rgb, plan);
        } catch (SampleException e) {
            throw e.withSampleId(img.name());
        } catch (OutOfMemoryError e) {
            throw outOfMemory(img, e);
        }
        long t3 = System.nanoTime();
        transformNanos += t3 - t2;
        cache.media().write(key, resized.data(), 0, n);
        cacheNanos += System.nanoTime() - t3;
        return resized;
    }

    /**
     * Decodes and transforms {@code img}, writing its pixel_values rows (little-endian float32) into
     * {@code dst} at byte {@code offsetBytes}: the batch segment itself, so no copy follows.
     */
    public void processInto(Planned img, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        RgbImage rgb = source(img);
        long t1 = System.nanoTime();
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
        RgbImage rgb = source(img);
        long t1 = System.nanoTime();
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
        RgbImage rgb = source(img);
        long t1 = System.nanoTime();
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
