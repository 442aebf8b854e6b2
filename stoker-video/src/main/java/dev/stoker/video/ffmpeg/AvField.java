package dev.stoker.video.ffmpeg;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Every FFmpeg struct field Stoker reads or writes, declared once with its byte offset for the one set of majors
 * Stoker has layouts for (FFmpeg 5.1: libavformat 59, libavcodec 59, libavutil 57; {@link FfmpegVersions}).
 *
 * <p>jextract is not used: the offsets are written by hand and {@code AvLayoutTest} compiles a C program against
 * the {@code libav*-dev} headers that prints {@code offsetof} of each constant here and fails on any difference.
 * Offsets move between majors (e.g. {@code AVStream.codecpar} is 208 in lavf 59 and near the top in lavf 60), so a
 * new major means a new table, never an edit of this one.
 */
public enum AvField {
    AVFormatContext_iformat("AVFormatContext", "iformat", 8, Kind.POINTER),
    AVFormatContext_pb("AVFormatContext", "pb", 32, Kind.POINTER),
    AVFormatContext_nb_streams("AVFormatContext", "nb_streams", 44, Kind.INT),
    AVFormatContext_streams("AVFormatContext", "streams", 48, Kind.POINTER),
    AVInputFormat_name("AVInputFormat", "name", 0, Kind.POINTER),
    AVIOContext_buffer("AVIOContext", "buffer", 8, Kind.POINTER),
    AVStream_index("AVStream", "index", 0, Kind.INT),
    AVStream_time_base("AVStream", "time_base", 16, Kind.RATIONAL),
    AVStream_start_time("AVStream", "start_time", 24, Kind.LONG),
    AVStream_duration("AVStream", "duration", 32, Kind.LONG),
    AVStream_nb_frames("AVStream", "nb_frames", 40, Kind.LONG),
    AVStream_avg_frame_rate("AVStream", "avg_frame_rate", 72, Kind.RATIONAL),
    AVStream_r_frame_rate("AVStream", "r_frame_rate", 200, Kind.RATIONAL),
    AVStream_codecpar("AVStream", "codecpar", 208, Kind.POINTER),
    AVCodecParameters_codec_type("AVCodecParameters", "codec_type", 0, Kind.INT),
    AVCodecParameters_codec_id("AVCodecParameters", "codec_id", 4, Kind.INT),
    AVCodecParameters_format("AVCodecParameters", "format", 28, Kind.INT),
    AVCodecParameters_width("AVCodecParameters", "width", 56, Kind.INT),
    AVCodecParameters_height("AVCodecParameters", "height", 60, Kind.INT),
    AVCodecParameters_color_range("AVCodecParameters", "color_range", 76, Kind.INT),
    AVCodecParameters_color_primaries("AVCodecParameters", "color_primaries", 80, Kind.INT),
    AVCodecParameters_color_trc("AVCodecParameters", "color_trc", 84, Kind.INT),
    AVCodecParameters_color_space("AVCodecParameters", "color_space", 88, Kind.INT),
    AVCodecParameters_sample_rate("AVCodecParameters", "sample_rate", 116, Kind.INT),
    AVCodecParameters_ch_layout("AVCodecParameters", "ch_layout", 144, Kind.CHANNEL_LAYOUT),
    AVPacket_pts("AVPacket", "pts", 8, Kind.LONG),
    AVPacket_dts("AVPacket", "dts", 16, Kind.LONG),
    AVPacket_size("AVPacket", "size", 32, Kind.INT),
    AVPacket_stream_index("AVPacket", "stream_index", 36, Kind.INT),
    AVPacket_flags("AVPacket", "flags", 40, Kind.INT),
    AVPacket_duration("AVPacket", "duration", 64, Kind.LONG),
    AVPacket_pos("AVPacket", "pos", 72, Kind.LONG),
    AVFrame_data("AVFrame", "data", 0, Kind.POINTERS8),
    AVFrame_linesize("AVFrame", "linesize", 64, Kind.INTS8),
    AVFrame_extended_data("AVFrame", "extended_data", 96, Kind.POINTER),
    AVFrame_width("AVFrame", "width", 104, Kind.INT),
    AVFrame_height("AVFrame", "height", 108, Kind.INT),
    AVFrame_nb_samples("AVFrame", "nb_samples", 112, Kind.INT),
    AVFrame_format("AVFrame", "format", 116, Kind.INT),
    AVFrame_key_frame("AVFrame", "key_frame", 120, Kind.INT),
    AVFrame_pts("AVFrame", "pts", 136, Kind.LONG),
    AVFrame_sample_rate("AVFrame", "sample_rate", 208, Kind.INT),
    AVFrame_flags("AVFrame", "flags", 316, Kind.INT),
    AVFrame_color_range("AVFrame", "color_range", 320, Kind.INT),
    AVFrame_colorspace("AVFrame", "colorspace", 332, Kind.INT),
    AVFrame_best_effort_timestamp("AVFrame", "best_effort_timestamp", 344, Kind.LONG),
    AVFrame_ch_layout("AVFrame", "ch_layout", 448, Kind.CHANNEL_LAYOUT),
    AVChannelLayout_order("AVChannelLayout", "order", 0, Kind.INT),
    AVChannelLayout_nb_channels("AVChannelLayout", "nb_channels", 4, Kind.INT),
    AVRational_num("AVRational", "num", 0, Kind.INT),
    AVRational_den("AVRational", "den", 4, Kind.INT);

    /** The C type of a field, which fixes its size (checked by the layout test through {@code sizeof}). */
    public enum Kind {
        INT(4), LONG(8), POINTER(8), RATIONAL(8),
        /** {@code uint8_t *x[8]} (AVFrame.data). */
        POINTERS8(64),
        /** {@code int x[8]} (AVFrame.linesize). */
        INTS8(32),
        /** {@code AVChannelLayout} held by value (order, nb_channels, a mask or map, opaque). */
        CHANNEL_LAYOUT(24);

        public final int sizeBytes;

        Kind(int sizeBytes) { this.sizeBytes = sizeBytes; }
    }

    /**
     * Enum values and {@code #define}s Stoker passes to FFmpeg, checked against the headers like the offsets
     * (C expression, value).
     */
    public enum Constant {
        AVMEDIA_TYPE_VIDEO("AVMEDIA_TYPE_VIDEO", 0),
        AVMEDIA_TYPE_AUDIO("AVMEDIA_TYPE_AUDIO", 1),
        AV_SAMPLE_FMT_FLT("AV_SAMPLE_FMT_FLT", 3),
        AV_CHANNEL_ORDER_UNSPEC("AV_CHANNEL_ORDER_UNSPEC", 0),
        AV_PKT_DATA_DISPLAYMATRIX("AV_PKT_DATA_DISPLAYMATRIX", 5),
        AV_PKT_FLAG_KEY("AV_PKT_FLAG_KEY", 1),
        AV_PKT_FLAG_CORRUPT("AV_PKT_FLAG_CORRUPT", 2),
        AV_PKT_FLAG_DISCARD("AV_PKT_FLAG_DISCARD", 4),
        AV_LOG_ERROR("AV_LOG_ERROR", 16),
        AVERROR_EAGAIN("AVERROR(EAGAIN)", -11),
        AVERROR_INVALIDDATA("AVERROR_INVALIDDATA", -1094995529),
        AVSEEK_FLAG_BACKWARD("AVSEEK_FLAG_BACKWARD", 1),
        AV_FRAME_FLAG_CORRUPT("AV_FRAME_FLAG_CORRUPT", 1),
        AVCOL_RANGE_JPEG("AVCOL_RANGE_JPEG", 2),
        AV_PIX_FMT_RGB24("AV_PIX_FMT_RGB24", 2),
        SWS_BICUBIC("SWS_BICUBIC", 4),
        AVDISCARD_DEFAULT("AVDISCARD_DEFAULT", 0),
        AVDISCARD_NONREF("AVDISCARD_NONREF", 8),
        AVERROR_EOF("AVERROR_EOF", -541478725),
        AVERROR_EXIT("AVERROR_EXIT", -1414092869),
        AVERROR_EIO("AVERROR(EIO)", -5),
        AVERROR_STREAM_NOT_FOUND("AVERROR_STREAM_NOT_FOUND", -1381258232),
        AVSEEK_SIZE("AVSEEK_SIZE", 0x10000),
        AVSEEK_FORCE("AVSEEK_FORCE", 0x20000),
        AV_NOPTS_VALUE_LOW("(int)(AV_NOPTS_VALUE & 0xffffffff)", 0),
        AV_NOPTS_VALUE_HIGH("(int)(AV_NOPTS_VALUE >> 32)", Integer.MIN_VALUE);

        public final String cExpression;
        public final int value;

        Constant(String cExpression, int value) {
            this.cExpression = cExpression;
            this.value = value;
        }
    }

    /** {@code AV_NOPTS_VALUE}: INT64_MIN, "no timestamp". */
    public static final long AV_NOPTS_VALUE = Long.MIN_VALUE;

    public final String struct;
    public final String field;
    public final long offset;
    public final Kind kind;

    AvField(String struct, String field, long offset, Kind kind) {
        this.struct = struct;
        this.field = field;
        this.offset = offset;
        this.kind = kind;
    }

    int getInt(MemorySegment struct) {
        if (kind != Kind.INT) throw new IllegalStateException(this + " is not an int");
        return struct.get(ValueLayout.JAVA_INT_UNALIGNED, offset);
    }

    long getLong(MemorySegment struct) {
        if (kind != Kind.LONG) throw new IllegalStateException(this + " is not an int64_t");
        return struct.get(ValueLayout.JAVA_LONG_UNALIGNED, offset);
    }

    MemorySegment getPointer(MemorySegment struct) {
        if (kind != Kind.POINTER) throw new IllegalStateException(this + " is not a pointer");
        return struct.get(ValueLayout.ADDRESS_UNALIGNED, offset);
    }

    void setPointer(MemorySegment struct, MemorySegment value) {
        if (kind != Kind.POINTER) throw new IllegalStateException(this + " is not a pointer");
        struct.set(ValueLayout.ADDRESS_UNALIGNED, offset, value);
    }

    /** Element {@code i} (0..7) of a {@code uint8_t *x[8]} field. */
    MemorySegment getPointer(MemorySegment struct, int i) {
        if (kind != Kind.POINTERS8 || i < 0 || i >= 8) throw new IllegalStateException(this + "[" + i + "]");
        return struct.get(ValueLayout.ADDRESS_UNALIGNED, offset + (long) i * ValueLayout.ADDRESS.byteSize());
    }

    /** Element {@code i} (0..7) of an {@code int x[8]} field. */
    int getInt(MemorySegment struct, int i) {
        if (kind != Kind.INTS8 || i < 0 || i >= 8) throw new IllegalStateException(this + "[" + i + "]");
        return struct.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 4L * i);
    }

    /** A pointer to a struct held by value inside {@code struct} (an {@code AVChannelLayout}). */
    MemorySegment inner(MemorySegment struct) {
        if (kind != Kind.CHANNEL_LAYOUT) throw new IllegalStateException(this + " is not a struct held by value");
        return struct.asSlice(offset, kind.sizeBytes);
    }

    /** An AVRational field as {num, den}. */
    Rational getRational(MemorySegment struct) {
        if (kind != Kind.RATIONAL) throw new IllegalStateException(this + " is not an AVRational");
        return new Rational(struct.get(ValueLayout.JAVA_INT_UNALIGNED, offset + AVRational_num.offset),
                struct.get(ValueLayout.JAVA_INT_UNALIGNED, offset + AVRational_den.offset));
    }

    /** The largest offset + size of any field of {@code struct}: how much of a struct Stoker may touch. */
    static long extentBytes(String struct) {
        long max = 0;
        for (AvField f : values()) if (f.struct.equals(struct)) max = Math.max(max, f.offset + f.kind.sizeBytes);
        return max;
    }
}
