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
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.DataSources;
import dev.stoker.source.mix.FeedSource;
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

    @Option(names = "--sample", description = "Sample JSON file; image paths are relative to its folder. Or --data and --record.")
    Path sample;

    @Option(names = "--record", paramLabel = "N", defaultValue = "-1",
            description = "With --data: the record to encode, 0-based, in the source's order (a manifest's lines, the shards' samples, the rows).")
    long record;

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
        // --data URI --record N: one record of a data set in any format (a manifest, tar shards, Parquet; local or s3://)
        keys.addAll(List.of(NodeConfig.DATA_KEY, NodeConfig.IMAGE_ROOT, NodeConfig.INDEX_CACHE, NodeConfig.S3_ENDPOINT, NodeConfig.S3_REGION,
                NodeConfig.S3_PATH_STYLE));
        return keys;
    }

    @Override
    public boolean configFile() { return false; }

    @Override
    public Integer call() throws Exception {
        var config = NodeOptions.config(spec, settings());
        if ((sample == null) == (config.get(NodeConfig.DATA_KEY) == null))
            throw new Main.InvalidInputException("give either --sample FILE.json or --data URI with --record N");
        if (sample == null) return encodeRecord(config);
        if (record != -1) throw new Main.InvalidInputException("--record is read with --data, not with --sample");
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
     * Record {@code --record} of {@code --data}, whatever its format: its images, videos and audio clips those its source
     * carries (a tar's members, a Parquet column) or those it names, read as {@code validate} reads them.
     */
    private int encodeRecord(NodeConfig config) throws Exception {
        var options = config.encodeOptions();
        VideoEncoding video = options.video();
        DataSources sources;
        try {
            sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--data " + config.data() + ": " + e.getMessage());
        }
        try (QwenTokenizer tok = NodeFeeds.tokenizer(config.get(NodeConfig.TOKENIZER)); sources) {
            var source = sources.feedSource();
            SampleRecords records;
            try {
                records = source.records();
            } catch (IOException | RuntimeException e) {
                throw new Main.InvalidInputException("cannot read --data " + config.data() + ": " + e.getMessage());
            }
            if (record < 0 || record >= records.size())
                throw new Main.InvalidInputException("--record " + (record < 0 ? "N is required with --data" : record + " is not a record of "
                        + config.data() + ", which has " + records.size()));
            int i = (int) record;
            SampleRecords.Record r;
            try {
                r = records.record(i).get(FeedSource.MANIFEST_TIMEOUT_SECONDS, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                throw e.getCause() instanceof RuntimeException re ? re : new IOException(e.getCause());
            } catch (InterruptedException | TimeoutException e) {
                throw new IOException("record " + i + " of " + config.data() + " not read: " + e, e);
            }
            var encoder = new SampleEncoder(options, tok);
            var parsed = encoder.parseRecord(r, records.id(i));
            SampleEncoder.ImageSource byReference = (id, ref) -> {
                try {
                    return source.fetch(i, id, ref).get(FeedSource.MANIFEST_TIMEOUT_SECONDS, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    throw e.getCause() instanceof RuntimeException re ? re
                            : new dev.stoker.core.SampleException(id, dev.stoker.core.SampleException.Stage.FETCH, ref + ": " + e.getCause(), e.getCause());
                } catch (InterruptedException | TimeoutException e) {
                    throw new dev.stoker.core.SampleException(id, dev.stoker.core.SampleException.Stage.FETCH, ref + " not read: " + e, e);
                }
            };
            var media = SampleEncoder.carried(r, parsed, byReference);
            var videos = video == null ? null : dev.stoker.encode.video.EmbeddedVideos.over(r.videos(), (sampleId, reference) -> source.openVideo(i, sampleId, reference));
            if (encoder.audio()) {
                write(encoder.encodeAudioSample(parsed, media, videos), out);
                return 0;
            }
            write(video == null ? encoder.encode(parsed, media) : encoder.encode(parsed, media, videos), out);
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
