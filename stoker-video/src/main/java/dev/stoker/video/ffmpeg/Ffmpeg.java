package dev.stoker.video.ffmpeg;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.charset.StandardCharsets;

/**
 * Binds the system's libavformat, libavcodec, libavutil, libswscale and libswresample (audio) through FFM (no JNI glue, no jextract: the
 * signatures are written by hand, the struct fields are {@link AvField}), once, on first use.
 *
 * <p>Loading is lazy: {@link #get()} binds the libraries the first time a video is touched, or a job with video
 * starts (their {@link #versions()} are part of its fingerprint), so a job without video never loads FFmpeg and a
 * host without it fails only its video samples, with one message naming the missing library.
 * At bind time the versions are checked against {@link FfmpegVersions#SUPPORTED}, FFmpeg's log level is set to
 * {@code AV_LOG_ERROR} and its errors are routed to the video that caused them ({@link FfmpegLog}).
 *
 * <p>Threading: the handles are immutable and FFmpeg's functions bound here are thread-safe on distinct contexts.
 * Decoder contexts (the next step) get {@code thread_count = 1}: decoding runs inside Stoker's own worker pool, and
 * FFmpeg's threads are invisible to its CPU accounting. {@code avformat_find_stream_info} already opens its probing
 * decoders with one thread in FFmpeg 5.1 (libavformat/demux.c forces {@code threads=1}).
 */
public final class Ffmpeg {
    /** Sonames first; the unversioned dev symlink only as a fallback (its major is checked all the same). */
    static final String[][] LIBRARIES = {
        {"libavutil.so.57", "libavutil.so"},
        {"libavcodec.so.59", "libavcodec.so"},
        {"libavformat.so.59", "libavformat.so"},
        {"libswscale.so.6", "libswscale.so"},
        // a dependency of libavcodec59 itself, so present wherever video decodes
        {"libswresample.so.4", "libswresample.so"},
    };

    private static final ValueLayout PTR = ValueLayout.ADDRESS;
    private static final ValueLayout I32 = ValueLayout.JAVA_INT;
    private static final ValueLayout I64 = ValueLayout.JAVA_LONG;

    final MethodHandle avformatAllocContext;
    final MethodHandle avformatOpenInput;
    final MethodHandle avformatFindStreamInfo;
    final MethodHandle avFindBestStream;
    final MethodHandle avReadFrame;
    final MethodHandle avformatCloseInput;
    final MethodHandle avioAllocContext;
    final MethodHandle avioContextFree;
    final MethodHandle avStreamGetSideData;
    final MethodHandle avPacketAlloc;
    final MethodHandle avPacketFree;
    final MethodHandle avPacketUnref;
    final MethodHandle avcodecGetName;
    final MethodHandle avMalloc;
    final MethodHandle avFreep;
    final MethodHandle avStrerror;
    final MethodHandle avGetPixFmtName;
    final MethodHandle avDisplayRotationGet;
    final MethodHandle avSeekFrame;
    // decoding
    final MethodHandle avcodecFindDecoder;
    final MethodHandle avcodecAllocContext3;
    final MethodHandle avcodecParametersToContext;
    final MethodHandle avcodecOpen2;
    final MethodHandle avcodecSendPacket;
    final MethodHandle avcodecReceiveFrame;
    final MethodHandle avcodecFlushBuffers;
    final MethodHandle avcodecFreeContext;
    final MethodHandle avFrameAlloc;
    final MethodHandle avFrameFree;
    final MethodHandle avFrameUnref;
    final MethodHandle avDictSet;
    final MethodHandle avDictFree;
    final MethodHandle avOptSetInt;
    // conversion to rgb24
    final MethodHandle swsGetCachedContext;
    final MethodHandle swsGetColorspaceDetails;
    final MethodHandle swsSetColorspaceDetails;
    final MethodHandle swsGetCoefficients;
    final MethodHandle swsIsSupportedInput;
    final MethodHandle swsScale;
    final MethodHandle swsFreeContext;
    // audio: sample formats and resampling to 16 kHz mono (stoker-audio)
    final MethodHandle avGetBytesPerSample;
    final MethodHandle avSampleFmtIsPlanar;
    final MethodHandle avChannelLayoutDefault;
    final MethodHandle avOptSetDouble;
    final MethodHandle swrAllocSetOpts2;
    final MethodHandle swrSetMatrix;
    final MethodHandle swrInit;
    final MethodHandle swrConvert;
    final MethodHandle swrGetOutSamples;
    final MethodHandle swrFree;
    final Linker linker = Linker.nativeLinker();

    private final int avformatVersion;
    private final int avcodecVersion;
    private final int avutilVersion;
    private final int swscaleVersion;
    private final int swresampleVersion;

    private static final class Holder {
        static final Ffmpeg INSTANCE;
        static final String FAILURE;

        static {
            Ffmpeg ffmpeg = null;
            String failure = null;
            try {
                ffmpeg = new Ffmpeg(LIBRARIES);
            } catch (FfmpegUnavailableException e) {
                failure = e.getMessage();
            }
            INSTANCE = ffmpeg;
            FAILURE = failure;
        }
    }

    /** The bound libraries; throws {@link FfmpegUnavailableException} (the same message each time) if they are not usable. */
    public static Ffmpeg get() {
        if (Holder.INSTANCE == null) throw new FfmpegUnavailableException(Holder.FAILURE);
        return Holder.INSTANCE;
    }

    /** Null when FFmpeg is usable, else why not (binds the libraries on first call). */
    public static String unavailableReason() { return Holder.FAILURE; }

    /** Binds the libraries named (tests pass names that do not exist to see the message). */
    Ffmpeg(String[][] libraries) {
        SymbolLookup[] libs = new SymbolLookup[libraries.length];
        for (int i = 0; i < libraries.length; i++) libs[i] = load(libraries[i]);
        SymbolLookup avutil = libs[0], avcodec = libs[1], avformat = libs[2], swscale = libs[3], swresample = libs[4];
        try {
            avutilVersion = (int) handle(avutil, "avutil_version", FunctionDescriptor.of(I32)).invokeExact();
            avcodecVersion = (int) handle(avcodec, "avcodec_version", FunctionDescriptor.of(I32)).invokeExact();
            avformatVersion = (int) handle(avformat, "avformat_version", FunctionDescriptor.of(I32)).invokeExact();
            swscaleVersion = (int) handle(swscale, "swscale_version", FunctionDescriptor.of(I32)).invokeExact();
            swresampleVersion = (int) handle(swresample, "swresample_version", FunctionDescriptor.of(I32)).invokeExact();
        } catch (FfmpegUnavailableException e) {
            throw e;
        } catch (Throwable t) {
            throw new FfmpegUnavailableException("FFmpeg version query failed: " + t);
        }
        String refusal = FfmpegVersions.refusal(avformatVersion, avcodecVersion, avutilVersion);
        if (refusal != null) throw new FfmpegUnavailableException(refusal);

        avformatAllocContext = handle(avformat, "avformat_alloc_context", FunctionDescriptor.of(PTR));
        avformatOpenInput = handle(avformat, "avformat_open_input", FunctionDescriptor.of(I32, PTR, PTR, PTR, PTR));
        avformatFindStreamInfo = handle(avformat, "avformat_find_stream_info", FunctionDescriptor.of(I32, PTR, PTR));
        avFindBestStream = handle(avformat, "av_find_best_stream",
                FunctionDescriptor.of(I32, PTR, I32, I32, I32, PTR, I32));
        avReadFrame = handle(avformat, "av_read_frame", FunctionDescriptor.of(I32, PTR, PTR));
        avformatCloseInput = handle(avformat, "avformat_close_input", FunctionDescriptor.ofVoid(PTR));
        avioAllocContext = handle(avformat, "avio_alloc_context",
                FunctionDescriptor.of(PTR, PTR, I32, I32, PTR, PTR, PTR, PTR));
        avioContextFree = handle(avformat, "avio_context_free", FunctionDescriptor.ofVoid(PTR));
        avStreamGetSideData = handle(avformat, "av_stream_get_side_data", FunctionDescriptor.of(PTR, PTR, I32, PTR));
        avPacketAlloc = handle(avcodec, "av_packet_alloc", FunctionDescriptor.of(PTR));
        avPacketFree = handle(avcodec, "av_packet_free", FunctionDescriptor.ofVoid(PTR));
        avPacketUnref = handle(avcodec, "av_packet_unref", FunctionDescriptor.ofVoid(PTR));
        avcodecGetName = handle(avcodec, "avcodec_get_name", FunctionDescriptor.of(PTR, I32));
        avMalloc = handle(avutil, "av_malloc", FunctionDescriptor.of(PTR, I64));
        avFreep = handle(avutil, "av_freep", FunctionDescriptor.ofVoid(PTR));
        avStrerror = handle(avutil, "av_strerror", FunctionDescriptor.of(I32, I32, PTR, I64));
        avGetPixFmtName = handle(avutil, "av_get_pix_fmt_name", FunctionDescriptor.of(PTR, I32));
        avDisplayRotationGet = handle(avutil, "av_display_rotation_get",
                FunctionDescriptor.of(ValueLayout.JAVA_DOUBLE, PTR));
        avSeekFrame = handle(avformat, "av_seek_frame", FunctionDescriptor.of(I32, PTR, I32, I64, I32));
        avcodecFindDecoder = handle(avcodec, "avcodec_find_decoder", FunctionDescriptor.of(PTR, I32));
        avcodecAllocContext3 = handle(avcodec, "avcodec_alloc_context3", FunctionDescriptor.of(PTR, PTR));
        avcodecParametersToContext = handle(avcodec, "avcodec_parameters_to_context", FunctionDescriptor.of(I32, PTR, PTR));
        avcodecOpen2 = handle(avcodec, "avcodec_open2", FunctionDescriptor.of(I32, PTR, PTR, PTR));
        avcodecSendPacket = handle(avcodec, "avcodec_send_packet", FunctionDescriptor.of(I32, PTR, PTR));
        avcodecReceiveFrame = handle(avcodec, "avcodec_receive_frame", FunctionDescriptor.of(I32, PTR, PTR));
        avcodecFlushBuffers = handle(avcodec, "avcodec_flush_buffers", FunctionDescriptor.ofVoid(PTR));
        avcodecFreeContext = handle(avcodec, "avcodec_free_context", FunctionDescriptor.ofVoid(PTR));
        avFrameAlloc = handle(avutil, "av_frame_alloc", FunctionDescriptor.of(PTR));
        avFrameFree = handle(avutil, "av_frame_free", FunctionDescriptor.ofVoid(PTR));
        avFrameUnref = handle(avutil, "av_frame_unref", FunctionDescriptor.ofVoid(PTR));
        avDictSet = handle(avutil, "av_dict_set", FunctionDescriptor.of(I32, PTR, PTR, PTR, I32));
        avDictFree = handle(avutil, "av_dict_free", FunctionDescriptor.ofVoid(PTR));
        avOptSetInt = handle(avutil, "av_opt_set_int", FunctionDescriptor.of(I32, PTR, PTR, I64, I32));
        swsGetCachedContext = handle(swscale, "sws_getCachedContext",
                FunctionDescriptor.of(PTR, PTR, I32, I32, I32, I32, I32, I32, I32, PTR, PTR, PTR));
        swsGetColorspaceDetails = handle(swscale, "sws_getColorspaceDetails",
                FunctionDescriptor.of(I32, PTR, PTR, PTR, PTR, PTR, PTR, PTR, PTR));
        swsSetColorspaceDetails = handle(swscale, "sws_setColorspaceDetails",
                FunctionDescriptor.of(I32, PTR, PTR, I32, PTR, I32, I32, I32, I32));
        swsGetCoefficients = handle(swscale, "sws_getCoefficients", FunctionDescriptor.of(PTR, I32));
        swsIsSupportedInput = handle(swscale, "sws_isSupportedInput", FunctionDescriptor.of(I32, I32));
        swsScale = handle(swscale, "sws_scale", FunctionDescriptor.of(I32, PTR, PTR, PTR, I32, I32, PTR, PTR));
        swsFreeContext = handle(swscale, "sws_freeContext", FunctionDescriptor.ofVoid(PTR));
        avGetBytesPerSample = handle(avutil, "av_get_bytes_per_sample", FunctionDescriptor.of(I32, I32));
        avSampleFmtIsPlanar = handle(avutil, "av_sample_fmt_is_planar", FunctionDescriptor.of(I32, I32));
        avChannelLayoutDefault = handle(avutil, "av_channel_layout_default", FunctionDescriptor.ofVoid(PTR, I32));
        avOptSetDouble = handle(avutil, "av_opt_set_double",
                FunctionDescriptor.of(I32, PTR, PTR, ValueLayout.JAVA_DOUBLE, I32));
        swrAllocSetOpts2 = handle(swresample, "swr_alloc_set_opts2",
                FunctionDescriptor.of(I32, PTR, PTR, I32, I32, PTR, I32, I32, I32, PTR));
        swrSetMatrix = handle(swresample, "swr_set_matrix", FunctionDescriptor.of(I32, PTR, PTR, I32));
        swrInit = handle(swresample, "swr_init", FunctionDescriptor.of(I32, PTR));
        swrConvert = handle(swresample, "swr_convert", FunctionDescriptor.of(I32, PTR, PTR, I32, PTR, I32));
        swrGetOutSamples = handle(swresample, "swr_get_out_samples", FunctionDescriptor.of(I32, PTR, I32));
        swrFree = handle(swresample, "swr_free", FunctionDescriptor.ofVoid(PTR));
        try {
            handle(avutil, "av_log_set_level", FunctionDescriptor.ofVoid(I32))
                    .invokeExact(AvField.Constant.AV_LOG_ERROR.value);
            FfmpegLog.install(this, handle(avutil, "av_log_set_callback", FunctionDescriptor.ofVoid(PTR)),
                    handle(avutil, "av_log_format_line2", FunctionDescriptor.of(I32, PTR, I32, PTR, PTR, PTR, I32, PTR)));
        } catch (Throwable t) {
            throw new FfmpegUnavailableException("setting FFmpeg's log callback failed: " + t);
        }
    }

    private static SymbolLookup load(String[] names) {
        try {
            return dev.stoker.core.io.NativeLibraries.lookup(names);
        } catch (IllegalArgumentException notFound) {
            return missing(names[0]);
        }
    }

    private static SymbolLookup missing(String soname) {
        String pkg = soname.substring(0, soname.indexOf(".so")) + soname.substring(soname.lastIndexOf('.') + 1);
        throw new FfmpegUnavailableException("FFmpeg library " + soname + " not found: video samples need the "
                + "system's FFmpeg 5.1 libraries (Debian 12: apt-get install " + pkg
                + " libavformat59 libavcodec59 libavutil57 libswscale6 libswresample4); images are not affected");
    }

    private MethodHandle handle(SymbolLookup lib, String name, FunctionDescriptor descriptor) {
        MemorySegment symbol = lib.find(name).orElseThrow(
                () -> new FfmpegUnavailableException("FFmpeg symbol " + name + " not found in the loaded libraries"));
        return linker.downcallHandle(symbol, descriptor);
    }

    /** "libavformat 59.27.100, libavcodec 59.37.100, libavutil 57.28.100, libswscale 6.7.100": part of a job's decoder fingerprint. */
    public String versions() {
        return "libavformat " + FfmpegVersions.dotted(avformatVersion) + ", libavcodec "
                + FfmpegVersions.dotted(avcodecVersion) + ", libavutil " + FfmpegVersions.dotted(avutilVersion)
                + ", libswscale " + FfmpegVersions.dotted(swscaleVersion);
    }

    /** "libswresample 4.7.100": the resampler's version, part of an audio job's decoder fingerprint. */
    public String swresampleVersion() { return "libswresample " + FfmpegVersions.dotted(swresampleVersion); }

    /** FFmpeg's text for an error code ("Invalid data found when processing input"). */
    public String errorText(int code) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(256);
            int rc = (int) avStrerror.invokeExact(code, buf, 256L);
            return rc < 0 ? "FFmpeg error " + code : buf.getString(0, StandardCharsets.UTF_8);
        } catch (Throwable t) {
            return "FFmpeg error " + code;
        }
    }

    String codecName(int codecId) {
        try {
            MemorySegment s = (MemorySegment) avcodecGetName.invokeExact(codecId);
            return cString(s);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    String pixelFormatName(int format) {
        try {
            MemorySegment s = (MemorySegment) avGetPixFmtName.invokeExact(format);
            return cString(s);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    /** A NUL-terminated C string of at most 256 bytes (FFmpeg's names are short), "" for NULL. */
    static String cString(MemorySegment s) {
        if (s.equals(MemorySegment.NULL)) return "";
        return s.reinterpret(256).getString(0, StandardCharsets.UTF_8);
    }
}
