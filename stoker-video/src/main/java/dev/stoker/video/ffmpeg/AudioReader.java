package dev.stoker.video.ffmpeg;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Decodes the chosen audio stream of a {@link Demuxer} (libavcodec, one thread) and resamples it with libswresample
 * to mono float32 at one output rate, handing the output over in chunks as it comes, so that memory holds one
 * frame's worth of native audio, never the file.
 *
 * <p><b>Downmix</b>: every input channel weighs {@code 1/channels} (a matrix set with {@code swr_set_matrix}), which
 * is librosa's {@code to_mono} (the mean over channels), not libswresample's default matrix (stereo to centre at
 * −3 dB each, 1.41× louder than the mean). <b>Resampler</b>: {@link Resampler#SOXR_HQ} is libswresample's soxr
 * engine at 20 bits of precision, the recipe librosa 0.11's default {@code res_type="soxr_hq"} asks python-soxr
 * for; {@link Resampler#SWR} is libswresample's own polyphase filter (faster, further from librosa). Neither is
 * promised bit-exact to librosa (its soxr runs one-shot on the whole clip; this one streams).
 *
 * <p><b>Trimming</b> happens at the native rate before resampling, counted in decoded samples from the first one
 * the decoder gives (after the priming samples the container says to drop), as librosa's soundfile path counts
 * {@code offset} and {@code duration}.
 *
 * <p>Threading: one thread at a time.
 */
public final class AudioReader implements AutoCloseable {
    /** libswresample's SWR_CH_MAX. */
    public static final int MAX_CHANNELS = 64;
    /** Highest native sample rate decoded (DXD is 352.8 kHz; nothing real goes past 768 kHz). */
    public static final int MAX_SAMPLE_RATE_HZ = 768_000;
    /** Most samples one decoded frame may carry (codecs use 1,024–16,384; a WAV packet a few thousand). */
    public static final int MAX_FRAME_SAMPLES = 1 << 20;

    /** Which resampler turns the native rate into the output rate (class comment). */
    public enum Resampler { SOXR_HQ, SWR }

    /** Receives resampled mono float32 samples; {@code samples} is valid only during the call. */
    @FunctionalInterface
    public interface Sink {
        void accept(MemorySegment samples, int count);
    }

    private final Demuxer demuxer;
    private final Ffmpeg ff;
    private final int outRateHz;
    private final Resampler resampler;
    private final Arena arena = Arena.ofConfined();
    private MemorySegment codecContext = MemorySegment.NULL;
    private MemorySegment frame = MemorySegment.NULL;
    private MemorySegment swr = MemorySegment.NULL;
    private final MemorySegment swrRef = arena.allocate(ValueLayout.ADDRESS);
    private final MemorySegment inPointers = arena.allocate(ValueLayout.ADDRESS, MAX_CHANNELS);
    private final MemorySegment outPointers = arena.allocate(ValueLayout.ADDRESS, 1);
    private Arena outArena;
    private MemorySegment out = MemorySegment.NULL;
    private int outCapacitySamples;
    private int inRateHz, inChannels, inFormat = -1, bytesPerSample;
    private boolean planar;
    private String codecName = "";
    private boolean packetsEnded;

    private AudioReader(Demuxer demuxer, int outRateHz, Resampler resampler) {
        this.demuxer = demuxer;
        this.ff = demuxer.ffmpeg();
        this.outRateHz = outRateHz;
        this.resampler = resampler;
    }

    /** Opens a one-thread decoder for the demuxer's chosen (audio) stream; a {@code SampleException} naming the file when libavcodec cannot. */
    public static AudioReader open(Demuxer demuxer, int outRateHz, Resampler resampler) {
        if (outRateHz <= 0 || outRateHz > MAX_SAMPLE_RATE_HZ) throw new IllegalArgumentException("output rate " + outRateHz);
        AudioReader r = new AudioReader(demuxer, outRateHz, resampler);
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
        try {
            int codecId = AvField.AVCodecParameters_codec_id.getInt(par);
            codecName = ff.codecName(codecId);
            MemorySegment codec = (MemorySegment) ff.avcodecFindDecoder.invokeExact(codecId);
            if (codec.equals(MemorySegment.NULL)) throw demuxer.error("no decoder for codec " + codecName + " in this FFmpeg", null);
            codecContext = (MemorySegment) ff.avcodecAllocContext3.invokeExact(codec);
            if (codecContext.equals(MemorySegment.NULL)) throw demuxer.error("avcodec_alloc_context3 failed", null);
            FfmpegLog.register(codecContext, demuxer);
            check((int) ff.avcodecParametersToContext.invokeExact(codecContext, par), "cannot set up the decoder");
            MemorySegment options = arena.allocate(ValueLayout.ADDRESS);
            check((int) ff.avDictSet.invokeExact(options, arena.allocateFrom("threads"), arena.allocateFrom("1"), 0),
                    "av_dict_set failed");
            int rc = (int) ff.avcodecOpen2.invokeExact(codecContext, codec, options);
            ff.avDictFree.invokeExact(options);
            check(rc, "cannot open the " + codecName + " decoder");
            frame = (MemorySegment) ff.avFrameAlloc.invokeExact();
            if (frame.equals(MemorySegment.NULL)) throw demuxer.error("av_frame_alloc failed", null);
            frame = frame.reinterpret(AvField.extentBytes("AVFrame"));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    /** The codec's name ("aac", "mp3float", "pcm_s16le"). */
    public String codecName() { return codecName; }

    /** The native sample rate, known after the first frame (0 before). */
    public int inputRateHz() { return inRateHz; }

    /** The native channel count, known after the first frame (0 before). */
    public int inputChannels() { return inChannels; }

    /**
     * Decodes the stream, drops its first {@code offsetSeconds} and resamples the next {@code durationSeconds} (the
     * rest when negative or NaN), counted in native samples as librosa's soundfile path does
     * ({@code int(offset * sr)}, {@code int(duration * sr)}), and hands the output to {@code sink}; returns how many
     * native samples were resampled. Stops reading the container once the kept part is complete. Call once.
     */
    public long decode(double offsetSeconds, double durationSeconds, Sink sink) {
        if (!(offsetSeconds >= 0) || Double.isInfinite(offsetSeconds)) throw new IllegalArgumentException("offset " + offsetSeconds);
        long position = 0, kept = 0, skipNative = 0, end = Long.MAX_VALUE;
        try {
            while (position < end && nextFrame()) {
                int n = AvField.AVFrame_nb_samples.getInt(frame);
                if (from(n)) {
                    skipNative = (long) (offsetSeconds * inRateHz);
                    if (durationSeconds >= 0) end = skipNative + (long) (durationSeconds * inRateHz);
                }
                long first = Math.max(position, skipNative), last = Math.min(position + n, end);
                if (last > first) {
                    int offset = (int) (first - position), count = (int) (last - first);
                    MemorySegment data = AvField.AVFrame_extended_data.getPointer(frame);
                    if (data.equals(MemorySegment.NULL)) throw demuxer.error("a frame without data", null);
                    int planes = planar ? inChannels : 1;
                    data = data.reinterpret(ValueLayout.ADDRESS.byteSize() * planes);
                    long step = (long) offset * bytesPerSample * (planar ? 1 : inChannels);
                    for (int p = 0; p < planes; p++) {
                        MemorySegment plane = data.getAtIndex(ValueLayout.ADDRESS, p);
                        if (plane.equals(MemorySegment.NULL)) throw demuxer.error("a frame with a NULL plane", null);
                        inPointers.setAtIndex(ValueLayout.ADDRESS, p, MemorySegment.ofAddress(plane.address() + step));
                    }
                    convert(inPointers, count, sink);
                    kept += count;
                }
                position += n;
                ff.avFrameUnref.invokeExact(frame);
            }
            if (!swr.equals(MemorySegment.NULL)) convert(MemorySegment.NULL, 0, sink);
            if (!demuxer.ffmpegErrors().isEmpty()) {
                throw demuxer.error("damaged: FFmpeg reported " + String.join("; ", demuxer.ffmpegErrors()), null);
            }
            return kept;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw demuxer.error("FFmpeg call failed: " + t, t);
        }
    }

    /** Resamples {@code count} input samples (NULL input: drains the resampler until it gives nothing). */
    private void convert(MemorySegment in, int count, Sink sink) throws Throwable {
        while (true) {
            int room = (int) ff.swrGetOutSamples.invokeExact(swr, count);
            if (room < 0) throw demuxer.error("swr_get_out_samples failed: " + ff.errorText(room), null);
            ensureOut(Math.max(room, 1));
            outPointers.setAtIndex(ValueLayout.ADDRESS, 0, out);
            int got = (int) ff.swrConvert.invokeExact(swr, outPointers, outCapacitySamples, in, count);
            if (got < 0) throw demuxer.error("swr_convert failed: " + ff.errorText(got), null);
            if (got > 0) sink.accept(out, got);
            if (!in.equals(MemorySegment.NULL) || got == 0) return;
        }
    }

    private void ensureOut(int samples) {
        if (samples <= outCapacitySamples) return;
        if (outArena != null) outArena.close();
        outArena = Arena.ofConfined();
        outCapacitySamples = Math.max(samples, 4096);
        out = outArena.allocate((long) outCapacitySamples * Float.BYTES, 64);
    }

    /** Checks the current frame against the first, or for the first sets up the resampler from it (then true). */
    private boolean from(int samples) throws Throwable {
        int rate = AvField.AVFrame_sample_rate.getInt(frame), format = AvField.AVFrame_format.getInt(frame);
        MemorySegment layout = AvField.AVFrame_ch_layout.inner(frame);
        int channels = AvField.AVChannelLayout_nb_channels.getInt(layout);
        if (samples <= 0 || samples > MAX_FRAME_SAMPLES) {
            throw demuxer.error("a frame of " + samples + " samples (1.." + MAX_FRAME_SAMPLES + " decoded)", null);
        }
        if (!swr.equals(MemorySegment.NULL)) {
            if (rate != inRateHz || format != inFormat || channels != inChannels) {
                throw demuxer.error("the audio changes mid-stream from " + inChannels + " channels at " + inRateHz
                        + " Hz to " + channels + " at " + rate + " Hz (or its sample format): not decoded", null);
            }
            return false;
        }
        if (rate <= 0 || rate > MAX_SAMPLE_RATE_HZ) {
            throw demuxer.error("a sample rate of " + rate + " Hz (1.." + MAX_SAMPLE_RATE_HZ + " decoded)", null);
        }
        if (channels <= 0 || channels > MAX_CHANNELS) {
            throw demuxer.error(channels + " channels (1.." + MAX_CHANNELS + " decoded)", null);
        }
        int bytes = (int) ff.avGetBytesPerSample.invokeExact(format);
        if (bytes <= 0) throw demuxer.error("an unknown sample format " + format, null);
        inRateHz = rate;
        inChannels = channels;
        inFormat = format;
        bytesPerSample = bytes;
        planar = (int) ff.avSampleFmtIsPlanar.invokeExact(format) != 0;
        MemorySegment inLayout = layout;
        if (AvField.AVChannelLayout_order.getInt(layout) == AvField.Constant.AV_CHANNEL_ORDER_UNSPEC.value) {
            inLayout = arena.allocate(AvField.Kind.CHANNEL_LAYOUT.sizeBytes, 8);
            ff.avChannelLayoutDefault.invokeExact(inLayout, channels);
        }
        MemorySegment mono = arena.allocate(AvField.Kind.CHANNEL_LAYOUT.sizeBytes, 8);
        ff.avChannelLayoutDefault.invokeExact(mono, 1);
        int rc = (int) ff.swrAllocSetOpts2.invokeExact(swrRef, mono, AvField.Constant.AV_SAMPLE_FMT_FLT.value, outRateHz,
                inLayout, format, rate, 0, MemorySegment.NULL);
        swr = swrRef.get(ValueLayout.ADDRESS, 0);
        check(rc, "swr_alloc_set_opts2 failed");
        if (swr.equals(MemorySegment.NULL)) throw demuxer.error("swr_alloc_set_opts2 gave NULL", null);
        if (resampler == Resampler.SOXR_HQ) {
            check((int) ff.avOptSetInt.invokeExact(swr, arena.allocateFrom("resampler"), 1L, 0),
                    "libswresample has no soxr engine");
            check((int) ff.avOptSetDouble.invokeExact(swr, arena.allocateFrom("precision"), 20.0, 0),
                    "cannot set the soxr precision");
        }
        MemorySegment matrix = arena.allocate(ValueLayout.JAVA_DOUBLE, channels);
        for (int c = 0; c < channels; c++) matrix.setAtIndex(ValueLayout.JAVA_DOUBLE, c, 1.0 / channels);
        check((int) ff.swrSetMatrix.invokeExact(swr, matrix, channels), "swr_set_matrix failed");
        check((int) ff.swrInit.invokeExact(swr), "cannot resample " + channels + " channels at " + rate + " Hz");
        return true;
    }

    /** The next decoded frame into {@link #frame}; false at the end of the stream. */
    private boolean nextFrame() throws Throwable {
        while (true) {
            int rc = (int) ff.avcodecReceiveFrame.invokeExact(codecContext, frame);
            if (rc >= 0) return true;
            if (rc == AvField.Constant.AVERROR_EOF.value) return false;
            if (rc != AvField.Constant.AVERROR_EAGAIN.value) check(rc, "cannot decode");
            demuxer.checkDeadline();
            if (packetsEnded) throw demuxer.error("the decoder wants input after the end of the stream", null);
            if (demuxer.nextPacket()) {
                int send = (int) ff.avcodecSendPacket.invokeExact(codecContext, demuxer.packet());
                if (send == AvField.Constant.AVERROR_INVALIDDATA.value) {
                    throw demuxer.error("a packet is damaged: " + ff.errorText(send) + errorsSuffix(), null);
                }
                check(send, "cannot decode");
            } else {
                packetsEnded = true;
                check((int) ff.avcodecSendPacket.invokeExact(codecContext, MemorySegment.NULL), "cannot drain the decoder");
            }
        }
    }

    private String errorsSuffix() {
        var reported = demuxer.ffmpegErrors();
        return reported.isEmpty() ? "" : " (FFmpeg: " + String.join("; ", reported) + ")";
    }

    private void check(int rc, String what) {
        if (rc < 0) throw demuxer.error(what + ": " + ff.errorText(rc) + errorsSuffix(), null);
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
            if (!swr.equals(MemorySegment.NULL)) {
                ff.swrFree.invokeExact(swrRef);
                swr = MemorySegment.NULL;
            }
        } catch (Throwable t) {
            throw new IllegalStateException("closing the audio decoder of " + demuxer.name() + " failed", t);
        } finally {
            if (outArena != null) outArena.close();
            arena.close();
        }
    }
}
