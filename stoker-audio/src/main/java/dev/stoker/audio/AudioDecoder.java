package dev.stoker.audio;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.video.ffmpeg.AudioReader;
import dev.stoker.video.ffmpeg.Demuxer;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;

/**
 * Decodes an audio file, or the audio track of a video, to 16 kHz mono float32: what {@code librosa.load(path,
 * sr=16000, offset=..., duration=...)} gives the Qwen audio processors ({@code qwen_omni_utils.audio_process}), here
 * through libavformat/libavcodec and libswresample ({@link AudioReader}: the mean of the channels, soxr at 20 bits)
 * instead of libsndfile/audioread and python-soxr.
 *
 * <p>Not bit-exact to librosa, and not promised to be: AAC and MP3 decoders are floating point and differ between
 * implementations, and librosa resamples the whole clip at once where this streams. What matches exactly is the
 * trimming rule ({@code int(offset·sr)} native samples dropped, {@code int(duration·sr)} kept), the downmix, and
 * PCM at 16 kHz mono (no resampling on either side). tools/audio-check measures the rest per format.
 *
 * <p>Bounded: at most {@link Options#maxSeconds} of output (more is this clip's error, never a truncation nobody
 * asked for), a deadline on the whole decode, and {@link AudioReader}'s limits on rate, channels and frame size.
 * A file without an audio stream, a video without an audio track, or bytes that are not media at all fail with a
 * {@link SampleException} (stage DECODE) beginning "audio NAME:".
 *
 * <p>Threading: static and stateless; each call opens its own demuxer and decoder.
 */
public final class AudioDecoder {
    /** The rate every Qwen audio family's feature extractor takes. */
    public static final int SAMPLE_RATE_HZ = 16_000;
    /** Default bound on one clip's decoded length: Qwen2.5-Omni's and Qwen3-Omni's 300 s chunk, twice. */
    public static final double DEFAULT_MAX_SECONDS = 600;

    private AudioDecoder() {}

    /**
     * What to decode.
     *
     * @param offsetSeconds   start, as librosa's {@code offset} (0: the beginning)
     * @param durationSeconds length, as librosa's {@code duration}; negative: to the end
     * @param maxSeconds      the most output a clip may have; longer is the clip's error
     * @param resampler       {@link AudioReader.Resampler#SOXR_HQ} (librosa's default quality) or the faster
     *                        {@link AudioReader.Resampler#SWR}
     */
    public record Options(double offsetSeconds, double durationSeconds, double maxSeconds,
                          AudioReader.Resampler resampler) {
        public Options {
            if (!(offsetSeconds >= 0) || Double.isInfinite(offsetSeconds)) {
                throw new IllegalArgumentException("offsetSeconds must be finite and >= 0: " + offsetSeconds);
            }
            if (Double.isNaN(durationSeconds) || Double.isInfinite(durationSeconds)) {
                throw new IllegalArgumentException("durationSeconds must be finite (negative: to the end): " + durationSeconds);
            }
            if (!(maxSeconds > 0) || maxSeconds > 86_400) {
                throw new IllegalArgumentException("maxSeconds must be in (0, 86400]: " + maxSeconds);
            }
            if (resampler == null) throw new IllegalArgumentException("resampler");
        }

        /** The whole clip, at most {@link #DEFAULT_MAX_SECONDS}, resampled by soxr. */
        public static Options whole() {
            return new Options(0, -1, DEFAULT_MAX_SECONDS, AudioReader.Resampler.SOXR_HQ);
        }

        public Options window(double offset, double duration) {
            return new Options(offset, duration, maxSeconds, resampler);
        }

        public Options maxSeconds(double max) { return new Options(offsetSeconds, durationSeconds, max, resampler); }

        public Options resampler(AudioReader.Resampler r) { return new Options(offsetSeconds, durationSeconds, maxSeconds, r); }

        /** The most 16 kHz samples a clip may have under these options. */
        public long maxSamples() { return (long) Math.ceil(maxSeconds * SAMPLE_RATE_HZ); }
    }

    /**
     * One decoded clip.
     *
     * @param samples      16 kHz mono float32, exactly {@code samples.length} long
     * @param nativeRateHz the stream's own rate
     * @param channels     the stream's own channel count
     * @param codec        FFmpeg's decoder name
     */
    public record Clip(float[] samples, int nativeRateHz, int channels, String codec) {
        public double seconds() { return samples.length / (double) SAMPLE_RATE_HZ; }
    }

    /** Decodes the file at {@code path}. */
    public static Clip decode(java.nio.file.Path path, Options options, long deadlineNanos) {
        try (SeekableByteSource source = SeekableByteSource.of(path)) {
            return decode(source, options, deadlineNanos);
        } catch (java.io.IOException e) {
            throw new SampleException(path.toString(), SampleException.Stage.DECODE, "audio " + path + ": " + e.getMessage(), e);
        }
    }

    /** Decodes in-memory bytes ({@code name} is what errors say). */
    public static Clip decode(String name, byte[] bytes, Options options, long deadlineNanos) {
        return decode(SeekableByteSource.of(name, bytes), options, deadlineNanos);
    }

    /**
     * Decodes {@code source} (the caller closes it) before {@code deadlineNanos} ({@link System#nanoTime()} clock).
     */
    public static Clip decode(SeekableByteSource source, Options options, long deadlineNanos) {
        long max = options.maxSamples();
        var out = new Sink(source.name(), max, options.maxSeconds());
        try (Demuxer demuxer = Demuxer.openAudio(source, deadlineNanos);
             AudioReader reader = AudioReader.open(demuxer, SAMPLE_RATE_HZ, options.resampler())) {
            reader.decode(options.offsetSeconds(), options.durationSeconds(), out);
            if (reader.inputRateHz() == 0) {
                throw new SampleException(source.name(), SampleException.Stage.DECODE,
                        "audio " + source.name() + ": the audio stream has no samples");
            }
            float[] samples = out.toArray();
            if (samples.length == 0) {
                // librosa would give an empty array, which no processor can turn into features
                throw new SampleException(source.name(), SampleException.Stage.DECODE, "audio " + source.name()
                        + ": no audio from " + options.offsetSeconds() + " s on (the offset is at or past its end, or "
                        + "the duration is 0)");
            }
            return new Clip(samples, reader.inputRateHz(), reader.inputChannels(), reader.codecName());
        }
    }

    /** Collects the resampled output into a growing array, refusing past the bound. */
    private static final class Sink implements AudioReader.Sink {
        private final String name;
        private final long max;
        private final double maxSeconds;
        private float[] buf = new float[16_384];
        private int size;

        Sink(String name, long max, double maxSeconds) {
            this.name = name;
            this.max = max;
            this.maxSeconds = maxSeconds;
        }

        @Override
        public void accept(MemorySegment samples, int count) {
            long need = (long) size + count;
            if (need > max) {
                throw new SampleException(name, SampleException.Stage.DECODE, "audio " + name + ": longer than "
                        + maxSeconds + " s, the most a clip may have (pass a duration, or raise the bound)");
            }
            if (need > buf.length) buf = Arrays.copyOf(buf, (int) Math.min(max, Math.max(need, 2L * buf.length)));
            MemorySegment.copy(samples, ValueLayout.JAVA_FLOAT, 0, buf, size, count);
            for (int i = size; i < size + count; i++) {
                // a float decoder fed damaged data can give NaN or infinity, which would poison every feature
                if (!Float.isFinite(buf[i])) {
                    throw new SampleException(name, SampleException.Stage.DECODE, "audio " + name
                            + ": damaged: a non-finite sample at " + i + " (of the 16 kHz output)");
                }
            }
            size += count;
        }

        float[] toArray() { return Arrays.copyOf(buf, size); }
    }
}
