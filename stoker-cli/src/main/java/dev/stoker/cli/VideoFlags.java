package dev.stoker.cli;

import dev.stoker.encode.TransformersVersion;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoKey;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;

/**
 * The video options of {@code stoker encode} (issue 29): the sampler and the command-level defaults per-item keys
 * override. Only {@code encode} takes them until the feed serves video (a flag a command ignores would be a lie).
 */
final class VideoFlags {
    @Option(names = "--video-sampler", defaultValue = "hf", paramLabel = "MODE",
            description = "hf (the family's HF video processor, sampling on), qwen-vl-utils (default: ${DEFAULT-VALUE}).")
    String sampler;

    @Option(names = "--video-fps", paramLabel = "FPS", description = "Frames per second sampled (default: 2).")
    Double fps;

    @Option(names = "--video-min-frames", paramLabel = "N", description = "Fewest frames sampled (default: 4).")
    Double minFrames;

    @Option(names = "--video-max-frames", paramLabel = "N", description = "Most frames sampled (default: 768).")
    Double maxFrames;

    @Option(names = "--video-min-pixels", paramLabel = "N",
            description = "Lower pixel bound (hf: per frame for Qwen2/2.5, over all frames for Qwen3).")
    Double minPixels;

    @Option(names = "--video-max-pixels", paramLabel = "N", description = "Upper pixel bound (as --video-min-pixels).")
    Double maxPixels;

    @Option(names = "--video-total-pixels", paramLabel = "N", description = "qwen-vl-utils: the budget over all frames.")
    Double totalPixels;

    @Option(names = "--video-cpu", defaultValue = "avx2", paramLabel = "CAP",
            description = "The torch build's CPU capability whose float rounding the qwen-vl-utils resize reproduces: "
                    + "default, avx2, avx512 (default: ${DEFAULT-VALUE}).")
    String cpu;

    /**
     * The video encoding these flags and {@code --transformers} name; a usage error for a bad value; null for a
     * release whose video rules Stoker does not know ({@link #unknownRelease}).
     */
    VideoEncoding encoding(CommandSpec spec, TransformersVersion transformers) {
        return encoding(spec, transformers, null, null);
    }

    /**
     * As {@link #encoding(CommandSpec, TransformersVersion)}, under a model folder's video processor settings
     * ({@code video_preprocessor_config.json}, else its {@code preprocessor_config.json}, as the HF video processors load
     * them) when {@code model} is given: the flags override them; a field Stoker cannot reproduce is refused, named.
     */
    VideoEncoding encoding(CommandSpec spec, TransformersVersion transformers, java.nio.file.Path model,
                           dev.stoker.core.ProcessorPreset family) {
        VideoOptions processor = null;
        if (model != null) {
            try {
                processor = dev.stoker.video.sample.VideoProcessorConfig.read(model, family).options();
            } catch (IllegalArgumentException e) {
                throw new dev.stoker.node.ConfigException("--model " + model + ": " + e.getMessage());
            }
        }
        try {
            VideoOptions options = VideoOptions.DEFAULTS;
            Double[] values = {fps, minFrames, maxFrames, minPixels, maxPixels, totalPixels};
            VideoKey[] keys = {VideoKey.FPS, VideoKey.MIN_FRAMES, VideoKey.MAX_FRAMES, VideoKey.MIN_PIXELS, VideoKey.MAX_PIXELS,
                VideoKey.TOTAL_PIXELS};
            for (int i = 0; i < keys.length; i++) if (values[i] != null) options = options.with(keys[i], values[i]);
            VideoContract contract = transformers == null ? VideoContract.OFFICIAL : contract(transformers);
            if (contract == null) return null;
            return new VideoEncoding(VideoSampler.fromName(sampler), options, processor, contract, CpuCapability.parse(cpu),
                    VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
    }

    /** Why {@code transformers}' video tensors cannot be made (null when they can): images keep working. */
    static String unknownRelease(TransformersVersion transformers) {
        if (transformers == null || contract(transformers) != null) return null;
        try {
            VideoContract.forTransformers(transformers.major(), transformers.minor());
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage() + ". The release is --transformers, or --model's config.json transformers_version "
                    + "(the release that saved the model, often not the trainer's): pass --transformers 4.57 or 5.18, the "
                    + "release the trainer runs";
        }
    }

    /** 4.57 and 5.18 are known; another release keeps images working and refuses only video samples. */
    private static VideoContract contract(TransformersVersion v) {
        try {
            return VideoContract.forTransformers(v.major(), v.minor());
        } catch (IllegalArgumentException unknown) {
            return null;
        }
    }
}
