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
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One video of a sample → its {@code pixel_values_videos} rows, in two halves like images: {@link #plan} indexes the
 * container (demuxing, no decoding) and applies the sampling and resizing rules, so the grid, the token count and
 * the memory are known before any pixel; {@link #writePixels} decodes only the sampled frames, resizes each as it
 * arrives (torchvision's uint8 kernel for the HF processors, its float32 kernel for qwen-vl-utils), then normalizes
 * and patchifies them. Reference: {@code process_video} of {@code shared/reference/ref_qwenvl_video.py}. In the
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
    public record Planned(String reference, FrameIndex index, VideoPlan plan) {
        /** Rows of pixel_values_videos: t·h·w. */
        public long rows() { return plan.patches(); }

        /** Bytes of the resized frames this video holds while it is encoded (u8 RGB). */
        public long clipBytes() { return (long) plan.frameCount() * plan.resizedHeight() * plan.resizedWidth() * 3; }
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
    private byte[] clip = new byte[0];
    private byte[] resized = new byte[0];
    private long videosDecoded, framesDecoded, framesKept, decodeNanos, decodedPixels;

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
        videosDecoded = framesDecoded = framesKept = decodeNanos = decodedPixels = 0;
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

    /** Indexes the video and plans it; a failure names the sample and the video. */
    public Planned plan(String sampleId, Message.Video item, VideoSource source) {
        if (item.isFrameList()) {
            throw new SampleException(sampleId, SampleException.Stage.DECODE, "a video given as a list of " + item.frames().size()
                    + " frame images: Stoker reads video files only so far (qwen-vl-utils' frame-list rule is not built yet)");
        }
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
        long need = planned.clipBytes() + (long) plan.frameWidth() * plan.frameHeight() * 3;
        if (need > memoryBudgetBytes) {
            throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + ref + ": " + plan.frameCount()
                    + " frames of " + plan.resizedWidth() + "x" + plan.resizedHeight() + " and one of " + plan.frameWidth()
                    + "x" + plan.frameHeight() + " need " + need + " bytes, over the decode memory budget of "
                    + memoryBudgetBytes);
        }
        return planned;
    }

    private static Map<String, Number> numbers(String sampleId, String ref, Map<String, Object> options) {
        var out = new LinkedHashMap<String, Number>();
        options.forEach((k, v) -> {
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
        VideoDecoder.Result result = decodeClip(sampleId, p, source);
        patches.write(clip, p.plan().frameCount(), p.plan().resizedWidth(), p.plan().resizedHeight(), dst, offsetBytes);
        return result;
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
        return decode(sampleId, p, source, (i, frame, bytes) -> System.arraycopy(frame, 0, dst, offset + i * bytes, bytes));
    }

    /** As {@link #writeResized(String, Planned, VideoSource, byte[], int)}, straight into {@code dst} (a batch's shared memory). */
    public VideoDecoder.Result writeResized(String sampleId, Planned p, VideoSource source, java.lang.foreign.MemorySegment dst,
                                            long offsetBytes) {
        if (offsetBytes < 0 || offsetBytes + p.clipBytes() > dst.byteSize())
            throw new IndexOutOfBoundsException("video " + p.reference() + ": " + p.clipBytes() + " bytes do not fit at byte "
                    + offsetBytes + " in " + dst.byteSize());
        return decode(sampleId, p, source, (i, frame, bytes) -> java.lang.foreign.MemorySegment.copy(frame, 0, dst,
                java.lang.foreign.ValueLayout.JAVA_BYTE, offsetBytes + (long) i * bytes, bytes));
    }

    /** Where a resized frame goes: frame {@code i} of the plan, {@code bytes} bytes of {@code frame}. */
    @FunctionalInterface
    private interface FrameSink {
        void put(int i, byte[] frame, int bytes);
    }

    /** Decodes the planned frames into {@code clip}, each resized as it arrives, in the plan's order. */
    private VideoDecoder.Result decodeClip(String sampleId, Planned p, VideoSource source) {
        VideoPlan plan = p.plan();
        int frameBytes = Math.multiplyExact(plan.resizedHeight(), plan.resizedWidth() * 3);
        if (clip.length < (long) plan.frameCount() * frameBytes) clip = new byte[Math.multiplyExact(plan.frameCount(), frameBytes)];
        return decode(sampleId, p, source, (i, frame, bytes) -> System.arraycopy(frame, 0, clip, i * bytes, bytes));
    }

    /** Decodes the planned frames, resizes each as it arrives and hands it to {@code sink} once per place it takes in the plan. */
    private VideoDecoder.Result decode(String sampleId, Planned p, VideoSource source, FrameSink sink) {
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
            result = decoder.decode(s, p.index(), frames, deadline, (f, w, h, rgb) -> {
                if (w != plan.frameWidth() || h != plan.frameHeight()) {
                    throw new SampleException(sampleId, SampleException.Stage.DECODE, "video " + p.reference() + ": frame " + f
                            + " is " + w + "x" + h + ", the stream said " + plan.frameWidth() + "x" + plan.frameHeight());
                }
                if (encoding.sampler() == VideoSampler.QWEN_VL_UTILS) f32.resize(rgb, w, h, resized, rw, rh);
                else u8.resize(rgb, w, h, resized, rw, rh);
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
        decodedPixels += result.framesDecoded() * plan.frameWidth() * plan.frameHeight();
        return result;
    }
}
