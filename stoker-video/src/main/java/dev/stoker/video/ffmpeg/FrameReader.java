package dev.stoker.video.ffmpeg;

import dev.stoker.core.SampleException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Decodes the chosen video stream of a {@link Demuxer} frame by frame (libavcodec, one thread) and converts a frame
 * to packed RGB24 the way FFmpeg's own rgb24 conversion does.
 *
 * <p><b>The reference conversion</b> is what {@code ffmpeg -noautorotate -fps_mode passthrough -pix_fmt rgb24} gives
 * (byte-identical to PyAV 18.1's {@code to_ndarray("rgb24")} on every conformance clip): FFmpeg 5.1's {@code scale}
 * filter (libavfilter/vf_scale.c, {@code scale_frame}) with the CLI's default {@code sws_flags=bicubic}, which
 * <ul>
 *   <li>takes the colour matrix the frame declares ({@code in_color_matrix=auto}: {@code parse_yuv_type}), BT.601
 *       (BT.470BG) when untagged or outside 1..10 or YCgCo;</li>
 *   <li>takes the frame's range when it declares one (JPEG = full), else keeps libswscale's default for the pixel
 *       format (full for the {@code yuvj*} formats, limited otherwise);</li>
 *   <li>uses the same matrix as the output table, and leaves brightness, contrast and saturation alone.</li>
 * </ul>
 * This class does the same with the same library (libswscale 6 of Debian's FFmpeg 5.1), into a buffer aligned and
 * padded as FFmpeg's frame buffers are (64-byte rows), so the same SIMD paths run. Rotation metadata is ignored
 * (the references use frames as stored); every decoded frame is returned (no rate conversion).
 *
 * <p>Threading: one thread at a time. {@code threads=1}: decoding runs inside Stoker's worker pool, whose CPU
 * accounting FFmpeg's own threads would escape.
 */
public final class FrameReader implements AutoCloseable {
    /** Widest and tallest frame decoded at all (a declared 30000×30000 stream is refused before decoding). */
    public static final int MAX_DIMENSION = 16_384;
    /** Most pixels per frame: 8K UHD (7680×4320) fits twice. */
    public static final long MAX_PIXELS = 2L * 7680 * 4320;
    private static final int ROW_ALIGN = 64;

    private final Demuxer demuxer;
    private final Ffmpeg ff;
    private final Arena arena = Arena.ofConfined();
    private MemorySegment codecContext = MemorySegment.NULL;
    private MemorySegment frame = MemorySegment.NULL;
    private MemorySegment sws = MemorySegment.NULL;
    private final MemorySegment srcData = arena.allocate(ValueLayout.ADDRESS, 8);
    private final MemorySegment srcStride = arena.allocate(ValueLayout.JAVA_INT, 8);
    private final MemorySegment dstData = arena.allocate(ValueLayout.ADDRESS, 4);
    private final MemorySegment dstStride = arena.allocate(ValueLayout.JAVA_INT, 4);
    private final MemorySegment details = arena.allocate(ValueLayout.ADDRESS, 8);
    private MemorySegment rgb = MemorySegment.NULL;
    private Arena rgbArena;
    private int swsWidth = -1, swsHeight = -1, swsFormat = -1, swsColorspace = -1, swsRange = -1;
    private boolean packetsEnded;
    /** Which packets must be decoded in full (by pts); null: all. Others are sent with skip_frame = NONREF. */
    private java.util.function.LongPredicate needed;
    private int discard = 0;
    private MemorySegment skipFrameName;
    private boolean haveFrame;
    private long framesDecoded;

    private FrameReader(Demuxer demuxer) {
        this.demuxer = demuxer;
        this.ff = demuxer.ffmpeg();
    }

    /**
     * Opens a decoder for the demuxer's chosen stream with one thread; a {@link SampleException} naming the video
     * when the codec is unknown, its size out of bounds, or libavcodec refuses it.
     */
    public static FrameReader open(Demuxer demuxer) {
        FrameReader r = new FrameReader(demuxer);
        try {
            r.openCodec();
            return r;
        } catch (RuntimeException | Error e) {
            r.close();
            throw e;
        }
    }

    private void openCodec() {
        MemorySegment par = demuxer.codecParameters();
        int width = AvField.AVCodecParameters_width.getInt(par), height = AvField.AVCodecParameters_height.getInt(par);
        checkSize(width, height, "its stream declares");
        try {
            int codecId = AvField.AVCodecParameters_codec_id.getInt(par);
            MemorySegment codec = (MemorySegment) ff.avcodecFindDecoder.invokeExact(codecId);
            if (codec.equals(MemorySegment.NULL)) {
                throw demuxer.error("no decoder for codec " + ff.codecName(codecId) + " in this FFmpeg", null);
            }
            codecContext = (MemorySegment) ff.avcodecAllocContext3.invokeExact(codec);
            if (codecContext.equals(MemorySegment.NULL)) throw demuxer.error("avcodec_alloc_context3 failed", null);
            FfmpegLog.register(codecContext, demuxer);
            check((int) ff.avcodecParametersToContext.invokeExact(codecContext, par), "cannot set up the decoder");
            MemorySegment options = arena.allocate(ValueLayout.ADDRESS);
            check((int) ff.avDictSet.invokeExact(options, arena.allocateFrom("threads"), arena.allocateFrom("1"), 0),
                    "av_dict_set failed");
            int rc = (int) ff.avcodecOpen2.invokeExact(codecContext, codec, options);
            ff.avDictFree.invokeExact(options);
            check(rc, "cannot open the " + ff.codecName(codecId) + " decoder");
            frame = (MemorySegment) ff.avFrameAlloc.invokeExact();
            if (frame.equals(MemorySegment.NULL)) throw demuxer.error("av_frame_alloc failed", null);
            frame = frame.reinterpret(AvField.extentBytes("AVFrame"));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    private void checkSize(int width, int height, String who) {
        if (width <= 0 || height <= 0 || width > MAX_DIMENSION || height > MAX_DIMENSION
                || (long) width * height > MAX_PIXELS) {
            throw demuxer.error(who + " a frame of " + width + "x" + height + ": outside what Stoker decodes (each "
                    + "side 1.." + MAX_DIMENSION + ", at most " + MAX_PIXELS + " pixels)", null);
        }
    }

    private void check(int rc, String what) {
        if (rc < 0) {
            var reported = demuxer.ffmpegErrors();
            throw demuxer.error(what + ": " + ff.errorText(rc)
                    + (reported.isEmpty() ? "" : " (FFmpeg: " + String.join("; ", reported) + ")"), null);
        }
    }

    /**
     * Decodes the next frame in presentation order; false when the stream has no more. Packets are read from the
     * demuxer as the decoder asks for them, and the decoder is drained at the end of the container.
     */
    public boolean next() {
        if (haveFrame) {
            unrefFrame();
            haveFrame = false;
        }
        try {
            while (true) {
                int rc = (int) ff.avcodecReceiveFrame.invokeExact(codecContext, frame);
                if (rc >= 0) {
                    haveFrame = true;
                    framesDecoded++;
                    int w = AvField.AVFrame_width.getInt(frame), h = AvField.AVFrame_height.getInt(frame);
                    checkSize(w, h, "the decoder gave");
                    return true;
                }
                if (rc == AvField.Constant.AVERROR_EOF.value) {
                    return false;
                }
                if (rc != AvField.Constant.AVERROR_EAGAIN.value) check(rc, "cannot decode frame " + framesDecoded);
                demuxer.checkDeadline();
                if (packetsEnded) throw demuxer.error("the decoder wants input after the end of the stream", null);
                if (demuxer.nextPacket()) {
                    if (needed != null) {
                        setDiscard(needed.test(AvField.AVPacket_pts.getLong(demuxer.packet()))
                                ? AvField.Constant.AVDISCARD_DEFAULT.value : AvField.Constant.AVDISCARD_NONREF.value);
                    }
                    int send = (int) ff.avcodecSendPacket.invokeExact(codecContext, demuxer.packet());
                    // EAGAIN here cannot happen after receive_frame gave EAGAIN (the send/receive contract)
                    if (send == AvField.Constant.AVERROR_INVALIDDATA.value) {
                        throw demuxer.error("frame " + framesDecoded + " is damaged: "
                                + ff.errorText(send) + errorsSuffix(), null);
                    }
                    check(send, "cannot decode frame " + framesDecoded);
                } else {
                    packetsEnded = true;
                    check((int) ff.avcodecSendPacket.invokeExact(codecContext, MemorySegment.NULL),
                            "cannot drain the decoder");
                }
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    private String errorsSuffix() {
        var reported = demuxer.ffmpegErrors();
        return reported.isEmpty() ? "" : " (FFmpeg: " + String.join("; ", reported) + ")";
    }

    /**
     * Lets the decoder skip the frames no other frame refers to (libavcodec's {@code skip_frame = AVDISCARD_NONREF})
     * in every packet whose pts {@code needed} rejects: such a frame is never output, and no other frame changes,
     * since none refers to it. Only for streams whose packets carry their frames' pts (the caller numbers frames by
     * pts, not by counting). Null decodes everything.
     */
    public void skipNonReferenceUnless(java.util.function.LongPredicate needed) { this.needed = needed; }

    private void setDiscard(int level) throws Throwable {
        if (level == discard) return;
        if (skipFrameName == null) skipFrameName = arena.allocateFrom("skip_frame");
        int rc = (int) ff.avOptSetInt.invokeExact(codecContext, skipFrameName, (long) level, 0);
        check(rc, "cannot set skip_frame");
        discard = level;
    }

    /**
     * Seeks to the last keyframe at or before {@code pts} and empties the decoder; {@link #next} then gives the
     * frames from that keyframe on.
     */
    public void seekBackward(long pts) {
        if (haveFrame) {
            unrefFrame();
            haveFrame = false;
        }
        demuxer.seekBackward(pts);
        try {
            ff.avcodecFlushBuffers.invokeExact(codecContext);
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
        packetsEnded = false;
    }

    private void unrefFrame() {
        try {
            ff.avFrameUnref.invokeExact(frame);
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    /** Frames the decoder has given since it was opened. */
    public long framesDecoded() { return framesDecoded; }

    /** The current frame's timestamp: its pts, or FFmpeg's best-effort timestamp when it has none. */
    public long framePts() {
        requireFrame();
        long pts = AvField.AVFrame_pts.getLong(frame);
        return pts != AvField.AV_NOPTS_VALUE ? pts : AvField.AVFrame_best_effort_timestamp.getLong(frame);
    }

    public int frameWidth() {
        requireFrame();
        return AvField.AVFrame_width.getInt(frame);
    }

    public int frameHeight() {
        requireFrame();
        return AvField.AVFrame_height.getInt(frame);
    }

    /** Whether libavcodec marked the current frame corrupt (concealed errors in a damaged stream). */
    public boolean frameCorrupt() {
        requireFrame();
        return (AvField.AVFrame_flags.getInt(frame) & AvField.Constant.AV_FRAME_FLAG_CORRUPT.value) != 0;
    }

    private void requireFrame() {
        if (!haveFrame) throw new IllegalStateException("no current frame");
    }

    /**
     * Converts the current frame to packed RGB24 (HWC, rows of {@code width·3} bytes) into {@code dst} from
     * {@code offset}, as FFmpeg's rgb24 conversion does (class comment).
     */
    public void toRgb24(byte[] dst, int offset) {
        requireFrame();
        int w = frameWidth(), h = frameHeight();
        long row = (long) w * 3;
        if (offset < 0 || offset + row * h > dst.length) throw new IndexOutOfBoundsException("rgb buffer too small");
        int format = AvField.AVFrame_format.getInt(frame);
        try {
            prepareScaler(w, h, format);
            long stride = (row + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
            for (int i = 0; i < 8; i++) {
                srcData.setAtIndex(ValueLayout.ADDRESS, i, AvField.AVFrame_data.getPointer(frame, i));
                srcStride.setAtIndex(ValueLayout.JAVA_INT, i, AvField.AVFrame_linesize.getInt(frame, i));
            }
            dstData.setAtIndex(ValueLayout.ADDRESS, 0, rgb);
            dstStride.setAtIndex(ValueLayout.JAVA_INT, 0, (int) stride);
            int rows = (int) ff.swsScale.invokeExact(sws, srcData, srcStride, 0, h, dstData, dstStride);
            if (rows != h) throw demuxer.error("sws_scale gave " + rows + " rows of " + h, null);
            for (int y = 0; y < h; y++) {
                MemorySegment.copy(rgb, ValueLayout.JAVA_BYTE, y * stride, dst, offset + (int) (y * row), (int) row);
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    private void prepareScaler(int w, int h, int format) throws Throwable {
        int colorspace = AvField.AVFrame_colorspace.getInt(frame);
        int range = AvField.AVFrame_color_range.getInt(frame);
        if (w == swsWidth && h == swsHeight && format == swsFormat && colorspace == swsColorspace && range == swsRange) {
            return;
        }
        if (format != swsFormat && (int) ff.swsIsSupportedInput.invokeExact(format) == 0) {
            throw demuxer.error("libswscale cannot convert pixel format " + ff.pixelFormatName(format), null);
        }
        int rgbFormat = AvField.Constant.AV_PIX_FMT_RGB24.value;
        sws = (MemorySegment) ff.swsGetCachedContext.invokeExact(sws, w, h, format, w, h, rgbFormat,
                AvField.Constant.SWS_BICUBIC.value, MemorySegment.NULL, MemorySegment.NULL, MemorySegment.NULL);
        if (sws.equals(MemorySegment.NULL)) {
            throw demuxer.error("libswscale cannot convert " + ff.pixelFormatName(format) + " " + w + "x" + h
                    + " to rgb24", null);
        }
        // vf_scale.c scale_frame: in_color_matrix=auto, the frame's range when it declares one
        MemorySegment invTable = details.asSlice(0, 8), srcFull = details.asSlice(8, 4),
                table = details.asSlice(16, 8), dstFull = details.asSlice(24, 4), brightness = details.asSlice(32, 4),
                contrast = details.asSlice(36, 4), saturation = details.asSlice(40, 4);
        int rc = (int) ff.swsGetColorspaceDetails.invokeExact(sws, invTable, srcFull, table, dstFull, brightness,
                contrast, saturation);
        if (rc < 0) throw demuxer.error("sws_getColorspaceDetails failed for " + ff.pixelFormatName(format), null);
        int matrix = colorspace < 1 || colorspace > 10 || colorspace == 8 ? 5 : colorspace;
        MemorySegment coefficients = (MemorySegment) ff.swsGetCoefficients.invokeExact(matrix);
        int inFull = range != 0 ? (range == AvField.Constant.AVCOL_RANGE_JPEG.value ? 1 : 0)
                : srcFull.get(ValueLayout.JAVA_INT, 0);
        rc = (int) ff.swsSetColorspaceDetails.invokeExact(sws, coefficients, inFull, coefficients,
                dstFull.get(ValueLayout.JAVA_INT, 0), brightness.get(ValueLayout.JAVA_INT, 0),
                contrast.get(ValueLayout.JAVA_INT, 0), saturation.get(ValueLayout.JAVA_INT, 0));
        // a negative result means "not supported for these formats" (e.g. RGB input), where vf_scale carries on too
        if (w != swsWidth || h != swsHeight) {
            if (rgbArena != null) rgbArena.close();
            rgbArena = Arena.ofConfined();
            long stride = ((long) w * 3 + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
            // + one row of slack: libswscale's SIMD writers may store a few bytes past a row's end
            rgb = rgbArena.allocate(stride * (h + 1), ROW_ALIGN);
        }
        swsWidth = w;
        swsHeight = h;
        swsFormat = format;
        swsColorspace = colorspace;
        swsRange = range;
    }

    @Override
    public void close() {
        try {
            if (!frame.equals(MemorySegment.NULL)) {
                ff.avFrameFree.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, frame));
                frame = MemorySegment.NULL;
            }
            if (!codecContext.equals(MemorySegment.NULL)) {
                FfmpegLog.unregister(codecContext);
                ff.avcodecFreeContext.invokeExact(arena.allocateFrom(ValueLayout.ADDRESS, codecContext));
                codecContext = MemorySegment.NULL;
            }
            if (!sws.equals(MemorySegment.NULL)) {
                ff.swsFreeContext.invokeExact(sws);
                sws = MemorySegment.NULL;
            }
        } catch (Throwable t) {
            throw new IllegalStateException("closing the decoder of " + demuxer.name() + " failed", t);
        } finally {
            if (rgbArena != null) rgbArena.close();
            arena.close();
        }
    }
}
