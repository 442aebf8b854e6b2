package dev.stoker.video.ffmpeg;

/**
 * What the container and {@code avformat_find_stream_info} say about the chosen video stream. The header's frame
 * count and duration are kept only as what they are, estimates: the frame index counts the real ones.
 *
 * <p>Colour tags are FFmpeg's enum values (AVColorSpace, AVColorRange, AVColorPrimaries,
 * AVColorTransferCharacteristic; 2 = unspecified); rotation is NaN when the stream has no display matrix.
 */
public record StreamInfo(
        int streamIndex, String container, String codec, Rational timeBase, Rational avgFrameRate,
        Rational realFrameRate, int width, int height, int pixelFormat, String pixelFormatName,
        int colorSpace, int colorRange, int colorPrimaries, int colorTransfer, double rotationDegrees,
        long startTime, long headerFrameCount, long headerDuration) {

    /** Reads the chosen stream of an open demuxer. */
    public static StreamInfo of(Demuxer d) {
        var s = d.stream();
        var p = d.codecParameters();
        Ffmpeg ff = d.ffmpeg();
        int format = AvField.AVCodecParameters_format.getInt(p);
        return new StreamInfo(
                d.streamIndex(), d.containerName(), ff.codecName(AvField.AVCodecParameters_codec_id.getInt(p)),
                AvField.AVStream_time_base.getRational(s), AvField.AVStream_avg_frame_rate.getRational(s),
                AvField.AVStream_r_frame_rate.getRational(s),
                AvField.AVCodecParameters_width.getInt(p), AvField.AVCodecParameters_height.getInt(p),
                format, format < 0 ? "" : ff.pixelFormatName(format),
                AvField.AVCodecParameters_color_space.getInt(p), AvField.AVCodecParameters_color_range.getInt(p),
                AvField.AVCodecParameters_color_primaries.getInt(p), AvField.AVCodecParameters_color_trc.getInt(p),
                d.rotationDegrees(), AvField.AVStream_start_time.getLong(s), AvField.AVStream_nb_frames.getLong(s),
                AvField.AVStream_duration.getLong(s));
    }
}
