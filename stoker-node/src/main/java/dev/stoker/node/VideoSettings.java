package dev.stoker.node;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoKey;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoProcessorConfig;
import java.nio.file.Path;
import java.util.List;

/**
 * What a configuration's video settings conclude, once (issue 29): the job's video encoding, made from the
 * {@code video-*} keys, the trainer's release ({@code --transformers}, or the model folder's) and the model folder's
 * video processor settings; or, where there is none, why the job's video records are refused.
 *
 * <p>Three outcomes. {@code --video off}: no encoding, no reason (video records refused as media Stoker does not serve,
 * as before video existed), and no video setting read. A release whose video rules Stoker does not know (only 4.57 and
 * 5.18 were checked against the vectors): no encoding and the reason, which the record parser says where it refuses a
 * video record, so that images keep working and a video names what to pass. Otherwise the encoding, every setting
 * checked here, where a bad one is a {@link ConfigException} at start: a value out of bounds, an option the sampler
 * has no use for, a sampler Stoker cannot encode, a model folder field Stoker cannot reproduce (named).
 *
 * @param encoding the job's video encoding, or null for none
 * @param refusal  why the job takes no video when that is not {@code --video off}, or null
 */
record VideoSettings(VideoEncoding encoding, String refusal) {
    /** The command-level numbers, each with the video option it sets. */
    private static final List<ConfigKey<Double>> NUMBERS = List.of(NodeSettings.VIDEO_FPS, NodeSettings.VIDEO_MIN_FRAMES,
            NodeSettings.VIDEO_MAX_FRAMES, NodeSettings.VIDEO_MIN_PIXELS, NodeSettings.VIDEO_MAX_PIXELS, NodeSettings.VIDEO_TOTAL_PIXELS);
    private static final List<VideoKey> OPTIONS = List.of(VideoKey.FPS, VideoKey.MIN_FRAMES, VideoKey.MAX_FRAMES, VideoKey.MIN_PIXELS,
            VideoKey.MAX_PIXELS, VideoKey.TOTAL_PIXELS);

    /**
     * The video settings of {@code config}, whose processor family is {@code family}.
     *
     * @throws ConfigException for a setting that makes no encoding, naming it
     */
    static VideoSettings of(NodeConfig config, ProcessorPreset family) {
        if (config.get(NodeSettings.VIDEO) == NodeSettings.VideoMode.OFF) return new VideoSettings(null, null);
        TransformersVersion release = config.get(NodeSettings.TRANSFORMERS);
        VideoContract contract;
        try {
            contract = release == null ? VideoContract.OFFICIAL : VideoContract.forTransformers(release.major(), release.minor());
        } catch (IllegalArgumentException unknown) {
            return new VideoSettings(null, unknown.getMessage() + ". The release is --transformers, or --model's config.json "
                    + "transformers_version (the release that saved the model, often not the trainer's): pass --transformers 4.57 "
                    + "or 5.18, the release the trainer runs");
        }
        VideoOptions options = VideoOptions.DEFAULTS;
        for (int i = 0; i < NUMBERS.size(); i++) {
            Double v = config.get(NUMBERS.get(i));
            if (v != null) options = options.with(OPTIONS.get(i), v); // checked as the key was read
        }
        VideoOptions processor = null;
        Path model = config.get(NodeSettings.MODEL);
        // an audio family's folder holds a video processor only where the family takes videos (Qwen2.5-Omni: its
        // preprocessor_config.json, the Whisper settings beside the Qwen-VL ones; Qwen2-Audio refuses videos)
        if (model != null && (config.audioModel() == null || config.audioModel().vision() != null)) {
            try {
                processor = VideoProcessorConfig.read(model, family).options();
            } catch (IllegalArgumentException e) {
                throw new ConfigException("--model " + model + ": " + e.getMessage() + " (a job without video: --video off)");
            }
        }
        try {
            var encoding = new VideoEncoding(config.get(NodeSettings.VIDEO_SAMPLER), options, processor, contract,
                    config.get(NodeSettings.VIDEO_CPU), Math.round(config.get(NodeSettings.VIDEO_DECODE_TIMEOUT) * 1e9),
                    config.get(NodeSettings.VIDEO_DECODE)); // where a feed decodes; encode and bench video decode in process
            encoding.planner(family); // an option the sampler has no use for (--video-total-pixels with hf)
            return new VideoSettings(encoding, null);
        } catch (IllegalArgumentException e) {
            throw new ConfigException(e.getMessage());
        }
    }
}
