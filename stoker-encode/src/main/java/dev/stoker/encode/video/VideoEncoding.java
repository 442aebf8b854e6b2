package dev.stoker.encode.video;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.TransformersCompat;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoPlanner;
import dev.stoker.video.sample.VideoSampler;
import java.util.Objects;

/**
 * How a job turns the videos of its samples into model inputs (issue 29): the sampling rules ({@code
 * --video-sampler}), the command-level video options ({@code --video-fps} … {@code --video-total-pixels}) over a
 * model folder's {@code video_preprocessor_config.json}, whose trainer's tokens and positions they follow
 * ({@link VideoContract}: qwen-vl-finetune without {@code --transformers}, or 4.57 / 5.18), the CPU capability whose
 * float rounding the qwen-vl-utils resize reproduces, and the time one video may take to decode.
 *
 * @param sampler            the sampling and resizing rules
 * @param options            command-level options (empty: the sampler's defaults for the family)
 * @param processor          a model folder's video processor options, under {@code options}; null for none
 * @param contract           whose text and positions
 * @param cpu                the torch build's CPU capability for the float resize (the vectors: AVX2)
 * @param decodeTimeoutNanos the most one video's decode may take (its deadline)
 * @param decode             where a feed decodes: in worker processes (a crash in libavcodec fails one video) or in its
 *                           own threads; {@code stoker encode} always decodes in process
 */
public record VideoEncoding(VideoSampler sampler, VideoOptions options, VideoOptions processor, VideoContract contract,
                            CpuCapability cpu, long decodeTimeoutNanos, Decode decode) {
    /** Where a feed decodes videos ({@code --video-decode}). */
    public enum Decode {
        /** In child JVM worker processes ({@link dev.stoker.video.isolate.IsolatedDecoder}): a native crash fails that video. */
        WORKERS,
        /** In the feed's CPU threads ({@link dev.stoker.video.decode.VideoDecoder}): no process hop; a native crash ends the service. */
        IN_PROCESS
    }

    /** One video's decode deadline unless set: a 2-hour 1080p video sampled at 2 fps decodes in well under this. */
    public static final long DEFAULT_DECODE_TIMEOUT_NANOS = 300_000_000_000L;

    public VideoEncoding {
        Objects.requireNonNull(sampler, "sampler");
        Objects.requireNonNull(options, "options");
        Objects.requireNonNull(contract, "contract");
        Objects.requireNonNull(cpu, "cpu");
        Objects.requireNonNull(decode, "decode");
        if (decodeTimeoutNanos <= 0) throw new IllegalArgumentException("decode timeout must be > 0");
    }

    /** An encoding that decodes in process. */
    public VideoEncoding(VideoSampler sampler, VideoOptions options, VideoOptions processor, VideoContract contract,
                         CpuCapability cpu, long decodeTimeoutNanos) {
        this(sampler, options, processor, contract, cpu, decodeTimeoutNanos, Decode.IN_PROCESS);
    }

    /** This encoding decoding {@code where}. */
    public VideoEncoding withDecode(Decode where) {
        return new VideoEncoding(sampler, options, processor, contract, cpu, decodeTimeoutNanos, where);
    }

    /**
     * The frame planner of this encoding for {@code family}: the command-level options over the model folder's.
     *
     * @throws IllegalArgumentException for an option the sampler has no use for ({@code --video-total-pixels} with hf)
     */
    public VideoPlanner planner(ProcessorPreset family) {
        return new VideoPlanner(family, sampler, compat(), processor == null ? options : options.over(processor),
                processor == null ? VideoOptions.DEFAULTS : processor);
    }

    /** The defaults: the HF video processor's sampling, qwen-vl-finetune's tokens, AVX2 rounding. */
    public static VideoEncoding defaults() {
        return new VideoEncoding(VideoSampler.HF, VideoOptions.DEFAULTS, null, VideoContract.OFFICIAL, CpuCapability.AVX2,
                DEFAULT_DECODE_TIMEOUT_NANOS);
    }

    /** How the decoder path reads when FFmpeg cannot be bound here (images work without it; video samples fail). */
    static final String DECODER_UNAVAILABLE = "decoder=FFmpeg unavailable";

    /**
     * This encoding as a job's fingerprint hashes it (stoker-pipeline's {@code Feeder}): everything that decides a video's
     * tensors (sampler, options, the model folder's options, contract, CPU capability) and the decoder path
     * ({@link #decoderPath()}). The decode deadline is left out, as the image decode memory budget is: it changes no
     * tensor, only which videos fail, and a job must resume on another machine.
     */
    public String fingerprintText() {
        return "VideoEncoding[sampler=" + sampler.cliName() + ", options=" + options.values() + ", processor="
                + (processor == null ? "none" : processor.values()) + ", contract=" + contract + ", cpu=" + cpu + "];"
                + decoderPath();
    }

    /**
     * The decoder path this JVM decodes videos with: FFmpeg's own rgb24 conversion (swscale, the stream's colour matrix
     * and range, bicubic) of the libraries it binds, with their versions (a frame's RGB can change with them); or, where
     * FFmpeg cannot be bound (missing, or a version Stoker has no struct layout for), that it is unavailable, said
     * rather than thrown, since image-only jobs run without FFmpeg. Binds FFmpeg on first call.
     */
    public static String decoderPath() {
        String unavailable = dev.stoker.video.ffmpeg.Ffmpeg.unavailableReason();
        return decoderPath(unavailable, unavailable == null ? dev.stoker.video.ffmpeg.Ffmpeg.get().versions() : null);
    }

    /** {@link #decoderPath()} from what binding FFmpeg gave: why it is unavailable (null when bound), else its versions. */
    static String decoderPath(String unavailableReason, String versions) {
        return unavailableReason != null ? DECODER_UNAVAILABLE : "decoder=FFmpeg rgb24 swscale bicubic (" + versions + ")";
    }

    /**
     * The processor release whose sampling and resize rules apply: 5.18 for its contract, else 4.57 (qwen-vl-finetune
     * computes {@code second_per_grid_ts} as 4.57 does, {@code 2 / fps}).
     */
    public TransformersCompat compat() {
        return contract == VideoContract.TRANSFORMERS_5_18 ? TransformersCompat.V5_18 : TransformersCompat.V4_57;
    }
}
