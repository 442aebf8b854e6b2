package dev.stoker.encode.video;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.core.VisionConfig;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.image.qwenvl.VideoPatchWriter;
import dev.stoker.image.torch.TorchBicubicF32Resizer;
import dev.stoker.image.torch.TorchBicubicU8Resizer;
import dev.stoker.text.Message;
import dev.stoker.text.VideoTokens;
import dev.stoker.video.decode.FrameDecoder;
import dev.stoker.video.decode.VideoDecoder;
import dev.stoker.video.index.FrameIndex;
import dev.stoker.video.index.FrameIndexer;
import dev.stoker.video.sample.VideoItemOptions;
import dev.stoker.video.sample.VideoMetadata;
import dev.stoker.video.sample.VideoPlan;
import dev.stoker.video.sample.VideoPlanner;
import dev.stoker.video.sample.VideoSampler;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One video of a sample → its {@code pixel_values_videos} rows, in two halves like images: {@link #plan} indexes the
 * container (demuxing, no decoding) and applies the sampling and resizing rules, so the grid, the token count and
 * the memory are known before any pixel; {@link #writePixels} decodes only the sampled frames, resizes each as it
 * arrives (torchvision's uint8 kernel for the HF processors, its float32 kernel for qwen-vl-utils; for llamafactory,
 * first LLaMA-Factory's Pillow pre-resize of the decoded frame, then the uint8 kernel, as its plugins hand PIL frames to
 * the HF processor), then normalizes and patchifies them. Reference: {@code process_video} of {@code shared/reference/ref_qwenvl_video.py}. In the
 * compact wire format {@link #writeResized} stops after the resize and writes the frames themselves, for the trainer to
 * normalize and patchify.
 *
 * <p>Threading: one instance per thread (resize and frame buffers).
 */
public final class VideoPreprocessor {
    /** Opens a video's bytes by the reference a record gives (relative to its folder or root, confined as images are). */
    @FunctionalInterface
    public interface VideoSource {
        SeekableByteSource open(String sampleId, String reference) throws IOException;
    }

    /**
     * A video planned: its exact index and what will be made of it.
     *
     * @param reference the record's reference to it
     * @param index     its frame index
     * @param plan      sampled frames, resized size, grid, timestamps
     */
    public record Planned(String reference, FrameIndex index, VideoPlan plan, FrameList frames) {
        /** A video file, planned. */
        public Planned(String reference, FrameIndex index, VideoPlan plan) { this(reference, index, plan, null); }

        /** Whether this video is a list of frame images (then {@link #index()} is null and {@link #frames()} holds them). */
        public boolean isFrameList() { return frames != null; }

        /** Rows of pixel_values_videos: t·h·w. */
        public long rows() { return plan.patches(); }

        /** Bytes of the resized frames this video holds while it is encoded (u8 RGB). */
        public long clipBytes() { return (long) plan.frameCount() * plan.resizedHeight() * plan.resizedWidth() * 3; }
    }

    /**
     * A video given as a list of frame images, planned: each frame's bytes (read at plan time through the sample's image
     * source, so that writing needs no source) and the size {@code fetch_image}'s Pillow resize gives every frame.
     *
     * @param names        the frames' references, in the list's order (not padded)
     * @param bytes        their bytes, likewise
     * @param pillowHeight the height after the Pillow resize (the float32 torchvision resize's input)
     * @param pillowWidth  the width
     */
    public record FrameList(List<String> names, List<byte[]> bytes, int pillowHeight, int pillowWidth) {
        public FrameList {
            names = List.copyOf(names);
            bytes = List.copyOf(bytes);
            if (names.isEmpty() || names.size() != bytes.size())
                throw new IllegalArgumentException(names.size() + " frame names, " + bytes.size() + " frame byte arrays");
        }
    }

    private final ProcessorPreset preset;
    private final VideoEncoding encoding;
    private final VideoPlanner planner;
    private final VideoPatchWriter patches;
    private final long memoryBudgetBytes;
    private final FrameDecoder decoder;
    private final FrameIndexer indexer = new FrameIndexer();
    /** Where frame indexes are kept between uses; null: each video indexed at each use. */
    private dev.stoker.video.index.FrameIndexStore frameIndexes;
    private final TorchBicubicU8Resizer u8 = new TorchBicubicU8Resizer();
    private final TorchBicubicF32Resizer f32;
    /** Frame lists: the decoder and options of their images (EXIF ignored, the image path's limits); null: refused. */
    private dev.stoker.image.decode.ImageDecoder frameDecoder;
    private dev.stoker.image.decode.DecodeOptions frameDecodeOptions;
    private dev.stoker.image.qwenvl.BicubicResizer pillow;
    private byte[] pillowFrame = new byte[0];
    /** The llamafactory pre-resize's second buffer (a frame may be resized more than once). */
    private byte[] pillowFrame2 = new byte[0];
    private byte[] clip = new byte[0];
    private byte[] resized = new byte[0];
    private long videosDecoded, framesDecoded, framesKept, decodeNanos, decodedPixels, cacheNanos;
    /** The cache of preprocessed samples; null: none. */
    private dev.stoker.encode.cache.PreprocessedCache cache;

    /**
     * Reads and writes videos' resized frames through {@code cache} (null: none): a video whose entry is there is not
     * decoded; one decoded here is stored. The key is the SHA-256 of the video's whole bytes (read once more for it) or of
     * its frame images, with every setting that decides the frames ({@link #cacheSettings}).
     */
    public void useCache(dev.stoker.encode.cache.PreprocessedCache cache) { this.cache = cache; }

    /** Time spent on cache keys (the video's digest), entry reads and writes since the last {@link #resetStats()}. */
    public long cacheNanos() { return cacheNanos; }

    /** Videos decoded since the last {@link #resetStats()}. */
    public long videosDecoded() { return videosDecoded; }

    /** Frames libavcodec produced, kept or not (a seek-less decode gives every frame up to the last one kept). */
    public long framesDecoded() { return framesDecoded; }

    /** Distinct frames kept. */
    public long framesKept() { return framesKept; }

    /** Wall time of the decodes, conversion to RGB and the resize of each frame as it arrives included. */
    public long decodeNanos() { return decodeNanos; }

    /** Pixels of the frames decoded (width · height each). */
    public long decodedPixels() { return decodedPixels; }

    public void resetStats() {
        videosDecoded = framesDecoded = framesKept = decodeNanos = decodedPixels = cacheNanos = 0;
    }

    /**
     * @param memoryBudgetBytes the most one video may hold while it is encoded: its resized frames plus one decoded
     *                          frame, counted from the plan before decoding
     */
    public VideoPreprocessor(ProcessorPreset preset, VisionConfig vision, VideoEncoding encoding, long memoryBudgetBytes) {
        this(preset, vision, encoding, memoryBudgetBytes, FrameDecoder.IN_PROCESS);
    }

    /** As above, decoding through {@code decoder} (a feed's worker processes, {@link dev.stoker.video.isolate.IsolatedDecoder}). */
    public VideoPreprocessor(ProcessorPreset preset, VisionConfig vision, VideoEncoding encoding, long memoryBudgetBytes,
                             FrameDecoder decoder) {
        this.decoder = java.util.Objects.requireNonNull(decoder, "decoder");
        this.preset = preset;
        this.encoding = encoding;
        this.planner = encoding.planner(preset);
        this.patches = new VideoPatchWriter(vision);
        this.f32 = new TorchBicubicF32Resizer(encoding.cpu());
        this.memoryBudgetBytes = memoryBudgetBytes;
    }

    /**
     * Keeps the frame indexes {@link #plan} builds in {@code store} and takes them from there when it holds one for a
     * video's bytes (null: none, each video indexed at each use, the default).
     */
    public void useFrameIndexStore(dev.stoker.video.index.FrameIndexStore store) { this.frameIndexes = store; }

    /** Floats per pixel_values_videos row (3·2·p·p). */
    public int rowLength() { return patches.rowLength(); }

    /** The made-up clip of {@link #warmUpPixels}: {@value #WARM_UP_FRAMES} frames (two temporal patches, the last padded) of 2·factor square. */
    static final int WARM_UP_FRAMES = 3;

    /** Bytes of {@link #warmUpPixels}' clip: its frames, HWC. */
    public long warmUpFrameBytes() {
        int side = 2 * patches.factor();
        return (long) WARM_UP_FRAMES * side * side * 3;
    }

    /** Bytes {@link #warmUpPixels} writes: the made-up clip's rows as float32. */
    public long warmUpBytes() {
        int side = 2 * patches.factor();
        return (long) patches.rows(WARM_UP_FRAMES, side, side) * patches.rowLength() * Float.BYTES;
    }

    /**
     * Writes the rows of a made-up clip ({@value #WARM_UP_FRAMES} frames of 2·factor square, its bytes {@code frames}:
     * {@link #warmUpFrameBytes()} of them) into {@code dst} from {@code offsetBytes} through this preprocessor's pixel
     * writer, so that the JIT compiles what a video read from the cache goes through before a trainer waits on it
     * ({@code CpuWarmUp}); counts nothing. A hit's frames are read from a mapped file, a miss's from the heap: the caller
     * hands both kinds over (C2 compiles for the kinds it saw).
     */
    public void warmUpPixels(java.lang.foreign.MemorySegment frames, java.lang.foreign.MemorySegment dst, long offsetBytes) {
        int side = 2 * patches.factor();
        patches.write(frames, WARM_UP_FRAMES, side, side, dst, offsetBytes);
    }

    /**
     * Lets this preprocessor take videos given as lists of frame images: their frames are decoded by {@code decoder} (one
     * per thread, as the image path's) with {@code options}' pixel limit and decode memory budget, EXIF orientation
     * ignored whatever {@code options} say (qwen-vl-utils' {@code Image.open} does not rotate), and resized by Pillow's
     * bicubic ({@code fetch_image}'s {@code Image.resize}). Without it a frame list is refused.
     */
    public void decodeFramesWith(dev.stoker.image.decode.ImageDecoder decoder, dev.stoker.image.decode.DecodeOptions options) {
        this.frameDecoder = java.util.Objects.requireNonNull(decoder, "decoder");
        this.frameDecodeOptions = options.withExif(dev.stoker.image.decode.ExifPolicy.IGNORE).withScale(1);
        this.pillow = new dev.stoker.image.qwenvl.BicubicResizer();
    }

    /** Indexes the video and plans it; a failure names the sample and the video. A frame list is refused. */
    public Planned plan(String sampleId, Message.Video item, VideoSource source) {
        return plan(sampleId, item, source, null);
    }

    /**
     * Indexes the video and plans it, or for a video given as a list of frame images ({@link Message.Video#isFrameList()})
     * reads every frame's bytes through {@code images} (the sample's image source: a feed's fetched bytes, or a blocking
     * read) and their headers, and plans it by {@link VideoPlanner#planFrameList}; a failure names the sample and the
     * video (or the frame).
     */
    public Planned plan(String sampleId, Message.Video item, VideoSource source, dev.stoker.encode.SampleEncoder.ImageSource images) {
        if (item.isFrameList()) return planFrameList(sampleId, item, images);
        String ref = item.ref();
        FrameIndex index;
        try (SeekableByteSource s = source.open(sampleId, ref)) {
            index = frameIndexes == null ? indexer.index(s) : frameIndexes.index(s, indexer);
        } catch (IOException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "video " + ref + ": " + e.getMessage(), e);
        } catch (SampleException e) {
            throw e.withSampleId(sampleId + " (" + ref + ")");
        }
        VideoPlan plan;
        try {
            plan = planner.plan(ref, VideoMetadata.of(index, ref), VideoItemOptions.of(numbers(sampleId, ref, item.options()), ref));
        } catch (IllegalArgumentException e) { // VideoPlanException included: the video's, named
            throw new SampleException(sampleId, SampleException.Stage.TRANSFORM, e.getMessage(), e);
        }
        var planned = new Planned(ref, index, plan);
        int sw = index.stream().width(), sh = index.stream().height();
        long need = planned.clipBytes() + (long) sw * sh * 3;
        if (plan.sampler() == VideoSampler.LLAMAFACTORY) // its Pillow pre-resize's two buffers (each step's output)
            for (int[] step : preResizeSteps(plan, sw, sh)) need += 2L * step[0] * step[1] * 3;
        if (need > memoryBudgetBytes) {
            throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + ref + ": " + plan.frameCount()
                    + " frames of " + plan.resizedWidth() + "x" + plan.resizedHeight() + " and one of " + sw
                    + "x" + sh + (plan.sampler() == VideoSampler.LLAMAFACTORY ? " with its Pillow pre-resize" : "") + " need "
                    + need + " bytes, over the decode memory budget of " + memoryBudgetBytes);
        }
        return planned;
    }

    private Planned planFrameList(String sampleId, Message.Video item, dev.stoker.encode.SampleEncoder.ImageSource images) {
        List<String> names = item.frames();
        String ref = "[" + names.size() + " frames: " + names.get(0) + (names.size() > 1 ? " … " + names.get(names.size() - 1) : "") + "]";
        if (frameDecoder == null || images == null)
            throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + ref + ": a video given as a list of frame "
                    + "images needs an image source and decoder, and this encoder has none");
        var bytes = new ArrayList<byte[]>(names.size());
        int[] heights = new int[names.size()], widths = new int[names.size()];
        long maxFrameBytes = 0;
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            try {
                byte[] b = images.read(sampleId, name);
                var info = frameDecoder.probe(b, name);
                if (info.pixelCount() > frameDecodeOptions.maxSourcePixels())
                    throw new SampleException(name, SampleException.Stage.DECODE, "frame " + name + " of " + info.width() + "x" + info.height()
                            + " = " + info.pixelCount() + " pixels exceeds the limit of " + frameDecodeOptions.maxSourcePixels());
                String alpha = alphaOf(b);
                if (alpha != null)
                    throw new SampleException(name, SampleException.Stage.DECODE, "frame " + name + " is " + alpha + ": qwen-vl-utils' to_rgb "
                            + "composites an RGBA frame over white, Stoker's decoders drop alpha as convert(\"RGB\") does; refused "
                            + "rather than misread");
                long need = frameDecoder.decodeBytes(b, name, frameDecodeOptions);
                if (need > frameDecodeOptions.maxDecodeBytes())
                    throw new SampleException(name, SampleException.Stage.DECODE, "frame " + name + " is over the decode memory budget: " + info.format()
                            + " of " + info.width() + "x" + info.height() + " needs about " + need + " bytes to decode, more than "
                            + frameDecodeOptions.maxDecodeBytes());
                bytes.add(b);
                heights[i] = info.height();
                widths[i] = info.width();
                maxFrameBytes = Math.max(maxFrameBytes, info.pixelCount() * 3);
            } catch (SampleException e) {
                throw e.withSampleId(sampleId + " (" + ref + ", frame " + i + " " + name + ")");
            }
        }
        VideoPlanner.FrameListPlan fl;
        try {
            fl = planner.planFrameList(ref, heights, widths, VideoItemOptions.of(numbers(sampleId, ref, item.options()), ref));
        } catch (IllegalArgumentException e) {
            throw new SampleException(sampleId, SampleException.Stage.TRANSFORM, e.getMessage(), e);
        }
        var planned = new Planned(ref, null, fl.plan(), new FrameList(names, bytes, fl.pillowHeight(), fl.pillowWidth()));
        long need = planned.clipBytes() + maxFrameBytes + (long) fl.pillowHeight() * fl.pillowWidth() * 3;
        for (byte[] b : bytes) need += b.length;
        if (need > memoryBudgetBytes)
            throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + ref + ": " + names.size() + " frames ("
                    + fl.plan().frameCount() + " padded) of " + fl.plan().resizedWidth() + "x" + fl.plan().resizedHeight()
                    + ", their encoded bytes and one decoded frame need " + need + " bytes, over the decode memory budget of "
                    + memoryBudgetBytes);
        return planned;
    }

    /**
     * What alpha a frame carries that Pillow opens as mode RGBA, which qwen-vl-utils' {@code to_rgb} composites over white
     * (PNG colour type 6, WebP with alpha, a 32-bit BMP with an alpha mask); null: none. Other modes with transparency
     * (palette, LA, RGB with tRNS) it converts as {@code convert("RGB")}, as Stoker's decoders do.
     */
    static String alphaOf(byte[] b) {
        if (b.length >= 70 && b[0] == 'B' && b[1] == 'M' && le16(b, 28) == 32) {
            // Pillow's BmpImagePlugin: BI_BITFIELDS masks after a 40-byte header (r, g, b; no alpha) or inside a larger one
            // (r, g, b, a); an alpha mask, or all four masks 0, open as BGRA/ABGR, i.e. RGBA
            long header = le32(b, 14), compression = le32(b, 30);
            long r = le32(b, 54), g = le32(b, 58), bl = le32(b, 62), a = header >= 56 || compression == 6 ? le32(b, 66) : 0;
            if ((compression == 3 || compression == 6) && (a != 0 || (r | g | bl | a) == 0))
                return "a 32-bit BMP with an alpha mask";
        }
        if (b.length > 25 && (b[0] & 0xFF) == 0x89 && b[1] == 'P' && b[2] == 'N' && b[3] == 'G' && b[25] == 6) return "an RGBA PNG";
        if (b.length > 20 && b[0] == 'R' && b[1] == 'I' && b[2] == 'F' && b[3] == 'F' && b[8] == 'W' && b[9] == 'E' && b[10] == 'B'
                && b[11] == 'P' && b[12] == 'V' && b[13] == 'P' && b[14] == '8') {
            if (b[15] == 'X' && (b[20] & 0x10) != 0) return "a WebP with alpha";
            if (b[15] == 'L' && b.length > 24 && (b[24] & 0x10) != 0) return "a lossless WebP with alpha";
        }
        return null;
    }

    private static int le16(byte[] b, int at) { return (b[at] & 0xFF) | (b[at + 1] & 0xFF) << 8; }

    private static long le32(byte[] b, int at) { return le16(b, at) | (long) le16(b, at + 2) << 16; }

    private static Map<String, Number> numbers(String sampleId, String ref, Map<String, Object> options) {
        var out = new LinkedHashMap<String, Number>();
        options.forEach((k, v) -> {
            // the audio families' flag (issue 32): read by their encoder, not a sampling option; the parser refuses it elsewhere
            if (k.equals(Message.USE_AUDIO_IN_VIDEO) && v instanceof Boolean) return;
            if (!(v instanceof Number n)) {
                throw new SampleException(sampleId, SampleException.Stage.TRANSFORM, "video " + ref + ": per-item key '" + k
                        + "' must be a number, got " + v);
            }
            out.put(k, n);
        });
        return out;
    }

    /** What the text needs of a planned video: its grid and the family's timing numbers. */
    public VideoTokens tokens(Planned p) {
        VideoPlan plan = p.plan();
        return switch (preset) {
            case QWEN2_VL -> VideoTokens.qwen2(plan.gridT(), plan.gridH(), plan.gridW());
            case QWEN2_5_VL -> VideoTokens.qwen25(plan.gridT(), plan.gridH(), plan.gridW(), plan.secondPerGridT());
            case QWEN3_VL -> VideoTokens.qwen3(plan.gridT(), plan.gridH(), plan.gridW(), plan.timestamps());
            // an audio family's videos are planned under its vision family (EncodeOptions.preset()) and tokenized by OmniTokens
            case QWEN2_AUDIO, QWEN2_5_OMNI, QWEN3_OMNI -> throw new IllegalStateException(preset + ": videos are planned under "
                    + preset.visionFamily());
        };
    }

    /**
     * Decodes the planned frames, resizes each as it arrives, and writes the video's pixel_values_videos rows into
     * {@code dst} from float {@code offset}; returns the decode's cost.
     */
    public VideoDecoder.Result writePixels(String sampleId, Planned p, VideoSource source, float[] dst, int offset) {
        VideoDecoder.Result result = decodeClip(sampleId, p, source);
        patches.write(clip, p.plan().frameCount(), p.plan().resizedWidth(), p.plan().resizedHeight(), dst, offset);
        return result;
    }

    /**
     * As {@link #writePixels(String, Planned, VideoSource, float[], int)}, as little-endian float32 straight into
     * {@code dst} (a batch's shared-memory object) from byte {@code offsetBytes}: {@link Planned#rows()} rows.
     */
    public VideoDecoder.Result writePixels(String sampleId, Planned p, VideoSource source, java.lang.foreign.MemorySegment dst,
                                           long offsetBytes) {
        VideoPlan plan = p.plan();
        // a hit's frames are read where they lie (a node's own entry, mapped) straight into the rows, never copied
        return cached(sampleId, p, source, () -> clipSegment(p),
                () -> decode(sampleId, p, source, (i, frame, bytes) -> System.arraycopy(frame, 0, clip, i * bytes, bytes)),
                frames -> patches.write(frames, plan.frameCount(), plan.resizedWidth(), plan.resizedHeight(), dst, offsetBytes));
    }

    /** This preprocessor's clip buffer, at least {@link Planned#clipBytes()} long, as a segment of exactly that many bytes. */
    private java.lang.foreign.MemorySegment clipSegment(Planned p) {
        if (clip.length < p.clipBytes()) clip = new byte[Math.toIntExact(p.clipBytes())];
        return java.lang.foreign.MemorySegment.ofArray(clip).asSlice(0, p.clipBytes());
    }

    /**
     * The compact wire format's half: decodes the planned frames and writes each resized as it arrives — the clip the
     * video processor would normalize and patchify, {@link Planned#clipBytes()} bytes, frame after frame (HWC) in the
     * plan's order — into {@code dst} from {@code offset}. Nothing is normalized: the trainer does it
     * ({@code stoker.pixels.to_pixel_values_videos}, {@code CompactPixels.toPixelValuesVideos}).
     */
    public VideoDecoder.Result writeResized(String sampleId, Planned p, VideoSource source, byte[] dst, int offset) {
        if (offset < 0 || offset + p.clipBytes() > dst.length)
            throw new IndexOutOfBoundsException("video " + p.reference() + ": " + p.clipBytes() + " bytes do not fit at " + offset
                    + " in " + dst.length);
        return cached(sampleId, p, source, java.lang.foreign.MemorySegment.ofArray(dst).asSlice(offset, p.clipBytes()),
                () -> decode(sampleId, p, source, (i, frame, bytes) -> System.arraycopy(frame, 0, dst, offset + i * bytes, bytes)));
    }

    /** As {@link #writeResized(String, Planned, VideoSource, byte[], int)}, straight into {@code dst} (a batch's shared memory). */
    public VideoDecoder.Result writeResized(String sampleId, Planned p, VideoSource source, java.lang.foreign.MemorySegment dst,
                                            long offsetBytes) {
        if (offsetBytes < 0 || offsetBytes + p.clipBytes() > dst.byteSize())
            throw new IndexOutOfBoundsException("video " + p.reference() + ": " + p.clipBytes() + " bytes do not fit at byte "
                    + offsetBytes + " in " + dst.byteSize());
        return cached(sampleId, p, source, dst.asSlice(offsetBytes, p.clipBytes()),
                () -> decode(sampleId, p, source, (i, frame, bytes) -> java.lang.foreign.MemorySegment.copy(frame, 0, dst,
                        java.lang.foreign.ValueLayout.JAVA_BYTE, offsetBytes + (long) i * bytes, bytes)));
    }

    /** Where a resized frame goes: frame {@code i} of the plan, {@code bytes} bytes of {@code frame}. */
    @FunctionalInterface
    private interface FrameSink {
        void put(int i, byte[] frame, int bytes);
    }

    /** Decodes the planned frames into {@code clip}, each resized as it arrives, in the plan's order (or reads them from the cache). */
    private VideoDecoder.Result decodeClip(String sampleId, Planned p, VideoSource source) {
        return cached(sampleId, p, source, clipSegment(p),
                () -> decode(sampleId, p, source, (i, frame, bytes) -> System.arraycopy(frame, 0, clip, i * bytes, bytes)));
    }

    /**
     * With a cache, the planned video's resized frames read from it into {@code out} ({@link Planned#clipBytes()} bytes,
     * where {@code decode} would put them), or else decoded by {@code decode} and then stored from {@code out}; without
     * one, {@code decode}. A video read from the cache counts no decoded frame.
     */
    private VideoDecoder.Result cached(String sampleId, Planned p, VideoSource source, java.lang.foreign.MemorySegment out,
                                       java.util.function.Supplier<VideoDecoder.Result> decode) {
        // a hit copied once into out, from where it lies (mapped), or read into out already
        return cached(sampleId, p, source, () -> out, decode, frames -> {
            if (frames != out) out.copyFrom(frames);
        });
    }

    /**
     * The planned video's resized frames handed to {@code use} where they lie: with a cache, a hit's read in place (a
     * node's own entry, mapped; else read into {@code out}'s segment); a miss's decoded by {@code decode} into
     * {@code out}'s ({@link Planned#clipBytes()} bytes) and stored from there. {@code out} is asked for only where the
     * frames must be put there. A video read from the cache counts no decoded frame.
     */
    private VideoDecoder.Result cached(String sampleId, Planned p, VideoSource source,
                                       java.util.function.Supplier<java.lang.foreign.MemorySegment> out,
                                       java.util.function.Supplier<VideoDecoder.Result> decode,
                                       java.util.function.Consumer<java.lang.foreign.MemorySegment> use) {
        if (cache == null) {
            var o = out.get();
            var result = decode.get();
            use.accept(o);
            return result;
        }
        long t0 = System.nanoTime();
        var key = cacheKey(sampleId, p, source);
        long[] read = {0};
        boolean hit = cache.media().readView(key, p.clipBytes(), out, frames -> {
            read[0] = System.nanoTime();
            use.accept(frames);
        });
        cacheNanos += (hit ? read[0] : System.nanoTime()) - t0;
        if (hit) return new VideoDecoder.Result(0, 0, 0, 0);
        var o = out.get();
        var result = decode.get();
        long t2 = System.nanoTime();
        cache.media().write(key, o);
        cacheNanos += System.nanoTime() - t2;
        use.accept(o);
        return result;
    }

    /**
     * What decides a planned video's resized frames, for its cache key: the video encoding (sampler, options, processor,
     * contract, CPU capability of the float resize) with its decoder path (the FFmpeg libraries' versions), the family, and
     * the plan (frames picked, their size before and after the resize).
     */
    private String cacheSettings(Planned p) {
        VideoPlan plan = p.plan();
        return "rules=" + dev.stoker.encode.cache.PreprocessedCache.PIXEL_RULES + " preset=" + preset + " encoding="
                + encoding.fingerprintText() + " frames=" + java.util.Arrays.toString(plan.frameIndices()) + " frame=" + plan.frameWidth()
                + "x" + plan.frameHeight() + " resized=" + plan.resizedWidth() + "x" + plan.resizedHeight() + " list=" + p.isFrameList();
    }

    /** The cache key of a planned video: the SHA-256 of all its bytes (or of each frame image's) and {@link #cacheSettings}. */
    private dev.stoker.cache.CacheKey cacheKey(String sampleId, Planned p, VideoSource source) {
        if (p.isFrameList()) {
            var digests = new byte[p.frames().bytes().size()][];
            for (int i = 0; i < digests.length; i++) digests[i] = dev.stoker.cache.CacheKey.sha256(p.frames().bytes().get(i));
            return dev.stoker.cache.CacheKey.of("video-frames-u8", cacheSettings(p), digests);
        }
        java.security.MessageDigest sha;
        try {
            sha = java.security.MessageDigest.getInstance("SHA-256");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        try (SeekableByteSource s = source.open(sampleId, p.reference()); var arena = java.lang.foreign.Arena.ofConfined()) {
            long size = s.sizeBytes();
            var buf = arena.allocate(1 << 20);
            for (long at = 0; at < size; ) {
                int n = s.read(at, buf.asSlice(0, Math.min(buf.byteSize(), size - at)));
                if (n <= 0) throw new IOException("the video ended at byte " + at + " of " + size);
                sha.update(buf.asSlice(0, n).asByteBuffer());
                at += n;
            }
        } catch (IOException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "video " + p.reference() + ": " + e.getMessage(), e);
        }
        return dev.stoker.cache.CacheKey.of("video-frames-u8", cacheSettings(p), sha.digest());
    }

    /** Decodes the planned frames, resizes each as it arrives and hands it to {@code sink} once per place it takes in the plan. */
    private VideoDecoder.Result decode(String sampleId, Planned p, VideoSource source, FrameSink sink) {
        if (p.isFrameList()) return decodeFrames(sampleId, p, sink);
        VideoPlan plan = p.plan();
        long[] wanted = plan.frameIndices();
        int n = wanted.length, rh = plan.resizedHeight(), rw = plan.resizedWidth();
        int frameBytes = Math.multiplyExact(rh, rw * 3);
        if (resized.length < frameBytes) resized = new byte[frameBytes];
        int[] frames = new int[n];
        for (int i = 0; i < n; i++) frames[i] = Math.toIntExact(wanted[i]);
        VideoDecoder.Result result;
        try (SeekableByteSource s = source.open(sampleId, p.reference())) {
            long deadline = System.nanoTime() + encoding.decodeTimeoutNanos();
            int sw = p.index().stream().width(), sh = p.index().stream().height();
            int[][] steps = plan.sampler() == VideoSampler.LLAMAFACTORY ? preResizeSteps(plan, sw, sh) : new int[0][];
            result = decoder.decode(s, p.index(), frames, deadline, (f, w, h, rgb) -> {
                if (w != sw || h != sh) {
                    throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + p.reference() + ": frame " + f
                            + " is " + w + "x" + h + ", the stream said " + sw + "x" + sh);
                }
                if (encoding.sampler() == VideoSampler.QWEN_VL_UTILS) f32.resize(rgb, w, h, resized, rw, rh);
                else if (steps.length == 0) u8.resize(rgb, w, h, resized, rw, rh);
                else {
                    byte[] pre = pillowPreResize(rgb, w, h, steps);
                    u8.resize(pre, plan.frameWidth(), plan.frameHeight(), resized, rw, rh);
                }
                for (int i = 0; i < n; i++) {
                    if (frames[i] == f) sink.put(i, resized, frameBytes);
                }
            });
        } catch (IOException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "video " + p.reference() + ": " + e.getMessage(), e);
        } catch (SampleException e) {
            throw e.withSampleId(sampleId + " (" + p.reference() + ")");
        }
        videosDecoded++;
        framesDecoded += result.framesDecoded();
        framesKept += result.framesKept();
        decodeNanos += result.nanos();
        decodedPixels += result.framesDecoded() * p.index().stream().width() * p.index().stream().height();
        return result;
    }

    /**
     * The llamafactory sampler's Pillow resizes of one frame ({@link VideoPlanner#llamaFactoryPreResizeSteps}), each of the
     * previous one's output; the plan's frame size is the last one's.
     */
    private int[][] preResizeSteps(VideoPlan plan, int width, int height) {
        int[][] steps = planner.llamaFactoryPreResizeSteps(plan.video(), width, height);
        int[] last = steps.length == 0 ? new int[] {width, height} : steps[steps.length - 1];
        if (last[0] != plan.frameWidth() || last[1] != plan.frameHeight())
            throw new IllegalStateException("video " + plan.video() + ": the pre-resize ends at " + last[0] + "x" + last[1]
                    + ", the plan says " + plan.frameWidth() + "x" + plan.frameHeight());
        return steps;
    }

    /**
     * LLaMA-Factory's {@code _preprocess_image} on a decoded frame (PyAV's {@code frame.to_image()}: FFmpeg's rgb24,
     * which {@code rgb} is): each Pillow {@code Image.resize((w, h))} in turn (the default filter for an RGB image,
     * bicubic; a call to the image's own size copies it), into one of two buffers; returns the last output.
     */
    private byte[] pillowPreResize(byte[] rgb, int w, int h, int[][] steps) {
        if (pillow == null) pillow = new dev.stoker.image.qwenvl.BicubicResizer();
        byte[] src = rgb;
        int cw = w, ch = h;
        for (int[] step : steps) {
            int bytes = Math.multiplyExact(step[0], step[1] * 3);
            byte[] dst = src == pillowFrame ? pillowFrame2 : pillowFrame;
            if (dst.length < bytes) {
                dst = new byte[bytes];
                if (src == pillowFrame) pillowFrame2 = dst; else pillowFrame = dst;
            }
            if (step[0] == cw && step[1] == ch) System.arraycopy(src, 0, dst, 0, bytes);
            else pillow.resize(src, cw, ch, dst, step[0], step[1]);
            src = dst;
            cw = step[0];
            ch = step[1];
        }
        return src;
    }

    /**
     * A frame list's frames, each decoded (EXIF ignored), Pillow-resized to the {@code fetch_image} size, then resized by
     * the float32 torchvision kernel (a copy where the sizes agree, as torchvision's {@code resize} returns its input) and
     * handed to {@code sink} for its place in the plan and, for the last frame, the padding after it.
     */
    private VideoDecoder.Result decodeFrames(String sampleId, Planned p, FrameSink sink) {
        VideoPlan plan = p.plan();
        FrameList fl = p.frames();
        int rh = plan.resizedHeight(), rw = plan.resizedWidth(), ph = fl.pillowHeight(), pw = fl.pillowWidth();
        int frameBytes = Math.multiplyExact(rh, rw * 3), pillowBytes = Math.multiplyExact(ph, pw * 3);
        if (resized.length < frameBytes) resized = new byte[frameBytes];
        if (pillowFrame.length < pillowBytes) pillowFrame = new byte[pillowBytes];
        long t0 = System.nanoTime(), pixels = 0;
        int count = fl.names().size(), n = plan.frameCount();
        for (int i = 0; i < count; i++) {
            String name = fl.names().get(i);
            try {
                var rgb = frameDecoder.decode(fl.bytes().get(i), name, frameDecodeOptions);
                pixels += rgb.pixelCount();
                byte[] src;
                if (rgb.width() == pw && rgb.height() == ph) src = rgb.data();
                else {
                    pillow.resize(rgb.data(), rgb.width(), rgb.height(), pillowFrame, pw, ph);
                    src = pillowFrame;
                }
                if (rh == ph && rw == pw) System.arraycopy(src, 0, resized, 0, frameBytes);
                else f32.resize(src, pw, ph, resized, rw, rh);
            } catch (SampleException e) {
                throw e.withSampleId(sampleId + " (" + p.reference() + ", frame " + i + " " + name + ")");
            }
            sink.put(i, resized, frameBytes);
            if (i == count - 1) for (int k = count; k < n; k++) sink.put(k, resized, frameBytes);
        }
        long nanos = System.nanoTime() - t0;
        videosDecoded++;
        framesDecoded += count;
        framesKept += count;
        decodeNanos += nanos;
        decodedPixels += pixels;
        return new VideoDecoder.Result(count, count, 0, nanos);
    }
}
