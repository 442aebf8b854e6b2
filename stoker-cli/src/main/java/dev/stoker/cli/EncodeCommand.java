package dev.stoker.cli;

import dev.stoker.core.Npy;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker encode}: one sample (either format) → every model input as .npy files. */
@Command(name = "encode", mixinStandardHelpOptions = true,
        description = "Encode one SFT sample (LLaVA conversations or HF messages JSON) into model inputs.")
final class EncodeCommand implements Callable<Integer>, NodeOptions.Configured {
    /** What decides how a sample becomes model inputs (the pixel format is the batch's: a sample's .npy files are float32). */
    static final List<ConfigKey<?>> SAMPLE_SETTINGS;

    static {
        var keys = new ArrayList<>(PreprocessCommand.IMAGE_SETTINGS);
        keys.addAll(List.of(NodeConfig.MAX_SEQ_LEN, NodeConfig.TRUNCATION, NodeConfig.TOKENIZER, NodeConfig.CHAT_TEMPLATE));
        SAMPLE_SETTINGS = List.copyOf(keys);
    }

    @Spec CommandSpec spec;

    @Option(names = "--sample", required = true, description = "Sample JSON file; image paths are relative to its folder.")
    Path sample;

    @Option(names = "--out", required = true, description = "Output folder (created).")
    Path out;

    @Override
    public boolean servesAudio() { return true; }

    @Override
    public List<ConfigKey<?>> settings() {
        // the trainer's release decides a video's tokens and positions (and the image backend's default)
        var keys = new ArrayList<>(SAMPLE_SETTINGS);
        keys.add(NodeConfig.TRANSFORMERS);
        keys.addAll(NodeConfig.VIDEO_ENCODING); // decoded in this process: --video-decode is the feed's
        keys.add(NodeConfig.AUDIO_PAD);
        keys.add(NodeConfig.USE_AUDIO_IN_VIDEO);
        return keys;
    }

    @Override
    public boolean configFile() { return false; }

    @Override
    public Integer call() throws IOException {
        var config = NodeOptions.config(spec, settings());
        var options = config.encodeOptions();
        byte[] json = PreprocessCommand.readInput(sample);
        VideoEncoding video = options.video(); // null: video records refused, saying why (options.videoRefusal())
        try (QwenTokenizer tok = NodeFeeds.tokenizer(config.get(NodeConfig.TOKENIZER))) {
            try (var objects = dev.stoker.source.ObjectSources.open(sample.toAbsolutePath().toString(), dev.stoker.source.SourceConfig.defaults())) {
                var encoder = new SampleEncoder(options, tok); // decodes in process
                var parsed = encoder.parse(json, sample.getFileName().toString());
                var images = SampleEncoder.ImageSource.blocking(objects);
                if (encoder.audio()) { // an audio family (issue 32): its clips' features too
                    var a = encoder.encodeAudioSample(parsed, images, video == null ? null
                            : (id, ref) -> dev.stoker.source.RangedObjectBytes.of(objects, ref, video.decodeTimeoutNanos()));
                    write(a, out);
                    return 0;
                }
                EncodedSample s = video == null ? encoder.encode(parsed, images) : encoder.encode(parsed, images,
                        (id, ref) -> dev.stoker.source.RangedObjectBytes.of(objects, ref, video.decodeTimeoutNanos()));
                write(s, out);
            }
        }
        return 0;
    }

    /**
     * An audio family's sample (docs/audio.md): what {@link #write(EncodedSample, Path)} writes, but position_ids as the
     * family numbers them ((3, L) int64 for Qwen2.5-Omni, (3, L) float32 for Qwen3-Omni, (1, L) int64 for Qwen2-Audio),
     * and input_features.npy (clips, 128, frames) float32 with feature_attention_mask.npy (clips, frames) int32.
     */
    static void write(dev.stoker.encode.audio.OmniEncoder.Encoded a, Path out) throws IOException {
        var s = a.sample();
        write(s, out);
        int n = s.length();
        if (a.floatPositions() != null) Npy.writeFloat32(out.resolve("position_ids.npy"), a.floatPositions(), 3, n);
        else Npy.writeInt64(out.resolve("position_ids.npy"), s.positionIds(), a.positionRows(), n);
        Npy.writeFloat32(out.resolve("input_features.npy"), a.inputFeatures(), a.clips(), dev.stoker.core.AudioPreset.MEL_BINS, a.frames());
        var mask = java.nio.ByteBuffer.allocate(4 * a.featureMask().length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (int v : a.featureMask()) mask.putInt(v);
        Npy.write(out.resolve("feature_attention_mask.npy"), "<i4", new long[] {a.clips(), a.frames()}, mask.array());
    }

    static void write(EncodedSample s, Path out) throws IOException {
        Files.createDirectories(out);
        int n = s.length();
        Npy.writeInt64(out.resolve("input_ids.npy"), s.inputIds(), n);
        Npy.writeInt64(out.resolve("labels.npy"), s.labels(), n);
        Npy.writeInt64(out.resolve("attention_mask.npy"), s.attentionMask(), n);
        if (s.positionIds().length == 3L * n) Npy.writeInt64(out.resolve("position_ids.npy"), s.positionIds(), 3, n); // else an audio family's, written by its caller
        Npy.writeFloat32(out.resolve("pixel_values.npy"), s.pixelValues(), s.pixelRows(), s.pixelRowLength()); // (0, 1176) without images, as a batch
        Npy.writeInt64(out.resolve("image_grid_thw.npy"), s.imageGridThw(), s.images(), 3);
        var v = s.videos();
        if (v != null && v.videos() > 0) {
            Npy.writeFloat32(out.resolve("pixel_values_videos.npy"), v.pixelValuesVideos(), v.rows(), v.rowLength());
            Npy.writeInt64(out.resolve("video_grid_thw.npy"), v.videoGridThw(), v.videos(), 3);
            if (v.secondPerGridTs().length > 0) {
                Npy.writeFloat32(out.resolve("second_per_grid_ts.npy"), v.secondPerGridTs(), v.secondPerGridTs().length);
            }
            Npy.writeInt64(out.resolve("frame_indices.npy"), v.frameIndices(), v.frameIndices().length);
        }
    }
}
