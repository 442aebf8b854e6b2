package dev.stoker.cli;

import dev.stoker.encode.validate.DatasetValidator;
import dev.stoker.encode.validate.LengthIndex;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.mix.DataSources;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code stoker validate}: every record of a source and its images' headers, judged as the feed would, without
 * decoding a pixel ({@link DatasetValidator}); prints the report, writes the length index ({@link LengthIndex}) and,
 * when the job encodes video, keeps each video's frame index in {@code frames/} beside it
 * ({@link dev.stoker.video.index.FrameIndexStore}); last, the summary JSON. Exit 0 when it ran, whatever the data held; 2 when the source cannot be read at all.
 */
@Command(name = "validate", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Check a data set without decoding pixels: every record and its images' headers, judged as serve would (errors and",
                "filtered samples by cause, with examples), images per sample, token lengths (tokenizer + chat template + smart_resize",
                "image tokens) as a histogram; writes the length index packing uses (lengths-<key>.bin). The last stdout line is JSON",
                "{\"samples\", \"errors\", \"filtered\", \"images\", \"tokens\": {\"p50\", \"p99\", \"max\"}, \"samples_per_s\", \"length_index\"}."})
final class ValidateCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Mixin LengthsDir lengths;

    @Option(names = "--examples", paramLabel = "N", defaultValue = "3",
            description = "Examples shown per cause (default: ${DEFAULT-VALUE}).")
    int examples;

    @Override
    public boolean servesAudio() { return true; }

    @Override
    public List<ConfigKey<?>> settings() {
        return new ArrayList<>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA)));
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        if (config.data() == null) throw new Main.InvalidInputException("--data is required: the manifest (a path, file://… or s3://…)");
        if (examples < 0) throw new Main.InvalidInputException("--examples must be >= 0, got " + examples);
        PrintWriter out = spec.commandLine().getOut();
        var options = config.encodeOptions();
        Path tokenizerFile = config.get(NodeConfig.TOKENIZER);
        Path dir = lengths.resolve(config);
        try (var tokenizer = NodeFeeds.tokenizer(tokenizerFile);
             var sources = open(config)) {
            var source = sources.feedSource();
            SampleRecords records;
            try {
                records = source.records();
            } catch (IOException | RuntimeException e) {
                throw new Main.InvalidInputException("cannot read --data " + config.data() + ": " + describe(e));
            }
            var settings = new DatasetValidator.Settings(options, config.threads(), 64 * config.threads(), examples);
            if (options.video() != null && dev.stoker.video.ffmpeg.Ffmpeg.unavailableReason() == null) // without FFmpeg each video is its record's error
                settings = settings.withFrameIndexes(dev.stoker.video.index.FrameIndexStore.of(dir.resolve("frames")));
            var report = DatasetValidator.validate(records, source, tokenizer, settings);
            report.print(out);
            var index = LengthIndex.of(LengthIndex.settings(options, tokenizerId(tokenizerFile)), report);
            Path file = index.write(dir);
            out.println("length index: " + file);
            out.println(report.summaryJson(file));
        }
        out.flush();
        return 0;
    }

    private static DataSources open(NodeConfig config) {
        try {
            return DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
        } catch (IllegalArgumentException e) {
            throw new Main.InvalidInputException("--data " + config.data() + ": " + e.getMessage());
        }
    }

    private static String describe(Throwable e) {
        if (e instanceof NoSuchFileException n) return "file not found: " + n.getFile();
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }

    /** "bundled", or the SHA-256 of the tokenizer file: a different tokenizer gives other lengths ({@link LengthIndex#tokenizerId}). */
    static String tokenizerId(Path file) throws IOException { return LengthIndex.tokenizerId(file); }
}
