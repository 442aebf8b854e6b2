package dev.stoker.cli;

import dev.stoker.bench.preprocess.DecodeBench;
import dev.stoker.bench.preprocess.PreprocessBench;
import dev.stoker.bench.video.VideoBench;
import dev.stoker.bench.video.VideoDecodeBench;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/** {@code stoker bench …}: whole-pipeline benchmarks, plans of stoker-bench (kernels are JMH: {@code ./stoker jmh}). */
@Command(name = "bench", mixinStandardHelpOptions = true, sortOptions = false, description = "Benchmarks of whole pipelines.",
        subcommands = {BenchCommand.Preprocess.class, BenchCommand.Decode.class, BenchCommand.VideoDecode.class, BenchCommand.Video.class, LadderCommand.class, HeadspaceCommand.class, HandoffCommand.class,
                FlightCommand.class, SoakCommand.class, ClusterCommand.class, WireCommand.class, IndexCommand.class, PackingCommand.class})
final class BenchCommand {
    /** What a benchmark that runs a feed takes of NodeConfig: the processor, the data and the store. */
    static final List<ConfigKey<?>> FEED_SETTINGS =
            NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA, ConfigKey.Group.STORE));

    /** The data set read as serve and validate read it (formats, image root, index cache, object store), the threads and the encoding. */
    static final List<ConfigKey<?>> DATA_AND_SAMPLE_SETTINGS;

    static {
        var keys = new ArrayList<ConfigKey<?>>(List.of(NodeConfig.DATA_KEY, NodeConfig.WEIGHT, NodeConfig.IMAGE_ROOT,
                NodeConfig.INDEX_CACHE, NodeConfig.ALLOW_REFS_OUTSIDE_ROOT, NodeConfig.S3_ENDPOINT, NodeConfig.S3_REGION,
                NodeConfig.S3_PATH_STYLE, NodeConfig.THREADS));
        keys.addAll(EncodeCommand.SAMPLE_SETTINGS);
        DATA_AND_SAMPLE_SETTINGS = List.copyOf(keys);
    }

    private BenchCommand() {}

    /** {@code stoker bench preprocess}: decode + transform + tokenize over a data set. */
    @Command(name = "preprocess", mixinStandardHelpOptions = true, sortOptions = false,
            description = {"Decode + transform + tokenize every sample of a data set on N threads.",
                    "The last stdout line is JSON {\"samples_per_s\":…, \"mpix_per_s\":…, \"threads\":…}; mpix_per_s counts "
                            + "source pixels as stored (before any DCT scaling)."})
    static final class Preprocess implements Callable<Integer>, NodeOptions.Configured {
        @Spec CommandSpec spec;

        @Option(names = "--limit", defaultValue = "0", description = "Samples to time, 0 for all (default: ${DEFAULT-VALUE}).")
        int limit;

        @Option(names = "--warmup", defaultValue = "200",
                description = "Samples encoded before timing starts, to let the JIT compile the hot paths (default: ${DEFAULT-VALUE}).")
        int warmup;

        @Override
        public List<ConfigKey<?>> settings() { return DATA_AND_SAMPLE_SETTINGS; }

        @Override
        public boolean configFile() { return false; }

        @Override
        public Integer call() throws Exception {
            var config = NodeOptions.config(spec, settings());
            if (config.data() == null) throw new ConfigException("--data is required: the data set (a manifest, tar shards or Parquet)");
            PreprocessBench.run(new PreprocessBench.Settings(config, limit, warmup), spec.commandLine().getOut());
            return 0;
        }
    }

    /** {@code stoker bench decode}: single-image decode rate, to compare with libjpeg-turbo's tjbench. */
    @Command(name = "decode", mixinStandardHelpOptions = true, sortOptions = false,
            description = {"Decode images to RGB at full size, over and over, on N threads, and report megapixels/s.",
                    "The last stdout line is JSON {\"mpix_per_s\":…, \"images_per_s\":…, \"threads\":…, \"decoder\":…}."})
    static final class Decode implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(arity = "1..*", description = "Image files.")
        List<Path> images;

        @Option(names = "--threads", defaultValue = "1", description = "Threads (default: ${DEFAULT-VALUE}).")
        int threads;

        @Option(names = "--seconds", defaultValue = "5", description = "Timed seconds after a warm-up of the same length (default: ${DEFAULT-VALUE}).")
        double seconds;

        @Option(names = "--decoder", defaultValue = "auto", description = "auto (libjpeg-turbo when present) or imageio (default: ${DEFAULT-VALUE}).")
        String decoder;

        @Override
        public Integer call() throws Exception {
            DecodeBench.run(new DecodeBench.Settings(images, threads, seconds, decoder), spec.commandLine().getOut());
            return 0;
        }
    }

    /** {@code stoker bench video-decode}: the FFM decode path against the ffmpeg CLI, and decoding only sampled frames. */
    @Command(name = "video-decode", mixinStandardHelpOptions = true, sortOptions = false,
            description = {"Decode every frame of each video with one thread, alternating with `ffmpeg -threads 1 "
                    + "-benchmark -f null`; then decode N frames spread over it (seeking) and compare them with a "
                    + "sequential decode.", "The last stdout line is a JSON array, one object per file."})
    static final class VideoDecode implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(arity = "1..*", description = "Video files.")
        List<Path> videos;

        @Option(names = "--rounds", defaultValue = "5", description = "Timed rounds per side of the full decode, 0 to skip it (default: ${DEFAULT-VALUE}).")
        int rounds;

        @Option(names = "--frames", defaultValue = "16",
                description = "Frames sampled per file for the seeking check, 0 to skip it (default: ${DEFAULT-VALUE}).")
        int frames;

        @Override
        public Integer call() throws Exception {
            if (rounds < 0 || frames < 0) throw new picocli.CommandLine.ParameterException(spec.commandLine(),
                    "--rounds and --frames must be at least 0");
            VideoDecodeBench.run(new VideoDecodeBench.Settings(videos, rounds, frames), spec.commandLine().getOut());
            return 0;
        }
    }

    /** {@code stoker bench video}: video samples encoded on N threads. */
    @Command(name = "video", mixinStandardHelpOptions = true, sortOptions = false,
            description = {"Encode the video samples of a data set on N threads: index, sample, decode only the sampled "
                    + "frames, resize, normalize, patchify, tokenize.", "Prints videos/s, frames decoded per frame kept and "
                    + "decode MP/s; the last stdout line is JSON."})
    static final class Video implements Callable<Integer>, NodeOptions.Configured {
        @Spec CommandSpec spec;

        @Option(names = "--limit", defaultValue = "0", description = "Samples to time, 0 for all (default: ${DEFAULT-VALUE}).")
        int limit;

        @Option(names = "--warmup", defaultValue = "8", description = "Samples encoded before timing starts (default: ${DEFAULT-VALUE}).")
        int warmup;

        @Override
        public List<ConfigKey<?>> settings() {
            var keys = new ArrayList<>(DATA_AND_SAMPLE_SETTINGS);
            keys.add(NodeConfig.TRANSFORMERS); // whose video tokens and positions
            keys.addAll(NodeConfig.VIDEO_ENCODING); // decoded in this process: --video-decode is the feed's
            return keys;
        }

        @Override
        public boolean configFile() { return false; }

        @Override
        public Integer call() throws Exception {
            var config = NodeOptions.config(spec, settings());
            if (config.data() == null) throw new ConfigException("--data is required: a manifest of video samples");
            VideoBench.run(new VideoBench.Settings(config, limit, warmup), spec.commandLine().getOut());
            return 0;
        }
    }
}
