package dev.stoker.encode.validate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.text.SampleParser;
import dev.stoker.text.TruncationPolicy;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ShapeIndexes}: the shapes measured from image headers equal what the encoder makes when it decodes (tokens =
 * input_ids length, each image's patches = t·h·w of its grid), errors and filtered records marked; validate's file
 * gives the same shapes, one source or a mix; a missing file is null, a file of another source's size is refused.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class ShapeIndexesTest {
    static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 100352)
            .withSequenceLimit(300, TruncationPolicy.REJECT);
    @TempDir Path tmp;

    /** 40 samples; record 5 names a missing image, record 9 is far over the 300-token limit. */
    private Path dataset(String name, int n, long seed) throws IOException {
        Path manifest = SmallJpegDataset.write(tmp.resolve(name), n, seed);
        var lines = Files.readAllLines(manifest);
        lines.set(5, "{\"id\": \"gone\", \"image\": \"images/nowhere.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": "
                + "\"<image>\\nWhat?\"}, {\"from\": \"gpt\", \"value\": \"No.\"}]}");
        lines.set(9, "{\"id\": \"long\", \"conversations\": [{\"from\": \"human\", \"value\": \"" + "Say it again. ".repeat(200)
                + "\"}, {\"from\": \"gpt\", \"value\": \"No.\"}]}");
        Files.write(manifest, lines);
        return manifest;
    }

    private static ShapeIndex measure(DataSources sources) throws Exception {
        var feed = sources.feedSource();
        return ShapeIndexes.measure(feed.records(), feed, SharedTokenizer.get(), OPTIONS, 2);
    }

    @Test
    void measuredShapesAreWhatTheEncoderMakes() throws Exception {
        Path manifest = dataset("a", 40, 3);
        try (var sources = DataSources.open(List.of(new DataSources.Spec(manifest.toString())), SourceConfig.defaults(), null)) {
            var shapes = measure(sources);
            assertEquals(40, shapes.size());
            assertEquals(SampleShape.Kind.ERROR, shapes.shape(5).kind());
            assertEquals(SampleShape.Kind.FILTERED, shapes.shape(9).kind());
            var encoder = new SampleEncoder(OPTIONS, SharedTokenizer.get());
            var parser = new SampleParser();
            var lines = Files.readAllLines(manifest);
            int images = 0, texts = 0;
            for (int i = 0; i < 40; i++) {
                if (i == 5 || i == 9) continue;
                var sample = parser.parseLine(lines.get(i).getBytes(StandardCharsets.UTF_8), "line" + i);
                var bytes = new HashMap<String, byte[]>();
                for (String ref : sample.imagePaths()) bytes.put(ref, Files.readAllBytes(manifest.resolveSibling(ref)));
                var encoded = encoder.encode(sample, bytes);
                var shape = shapes.shape(i);
                assertEquals(SampleShape.Kind.OK, shape.kind(), "record " + i);
                assertEquals(encoded.inputIds().length, shape.tokens(), "record " + i + ": tokens");
                long[] grid = encoded.imageGridThw();
                assertEquals(grid.length / 3, shape.images(), "record " + i + ": images");
                long rows = 0;
                for (int k = 0; k < shape.images(); k++) {
                    assertEquals(grid[3 * k] * grid[3 * k + 1] * grid[3 * k + 2], shape.imagePatches(k), "record " + i + " image " + k);
                    rows += shape.imagePatches(k);
                }
                assertEquals(encoded.pixelValues().length / encoded.pixelRowLength(), rows, "record " + i + ": patches = pixel_values rows");
                assertEquals(encoder.shape(sample, bytes), shape, "the encoder's own shape()");
                if (shape.hasImage()) images++;
                else texts++;
            }
            assertTrue(images > 20 && texts > 0, images + " with images, " + texts + " without");
        }
    }

    @Test
    void validatesFileGivesTheSameShapesAndAMissingOneIsNull() throws Exception {
        Path manifest = dataset("a", 40, 3);
        Path dir = tmp.resolve("lengths");
        try (var sources = DataSources.open(List.of(new DataSources.Spec(manifest.toString())), SourceConfig.defaults(), null)) {
            var feed = sources.feedSource();
            var records = feed.records();
            assertNull(ShapeIndexes.load(dir, records, OPTIONS, "bundled"), "no validate file yet");
            var report = DatasetValidator.validate(records, feed, SharedTokenizer.get(), DatasetValidator.Settings.of(OPTIONS, 2));
            Path file = LengthIndex.of(report.source(), report.digest(), LengthIndex.settings(OPTIONS, "bundled"), report.lengths(),
                    report.imagePatches()).write(dir);
            var loaded = ShapeIndexes.load(dir, records, OPTIONS, "bundled");
            var measured = measure(sources);
            assertEquals(measured.size(), loaded.size());
            for (int i = 0; i < measured.size(); i++) assertEquals(measured.shape(i), loaded.shape(i), "record " + i);
            assertNull(ShapeIndexes.load(dir, records, OPTIONS.withPixels(3136, 50176), "bundled"), "other settings, another file");
            assertNull(ShapeIndexes.load(dir, records, OPTIONS, "sha256:00"), "another SharedTokenizer.get(), another file");
            // an index written under the rules before audio was refused (no record_rules) counted such records as kept
            var before = new java.util.LinkedHashMap<>(LengthIndex.settings(OPTIONS, "bundled"));
            before.remove("record_rules");
            Files.delete(file);
            LengthIndex.of(report.source(), report.digest(), before, report.lengths(), report.imagePatches()).write(dir);
            assertNull(ShapeIndexes.load(dir, records, OPTIONS, "bundled"), "an index of older record rules is not read");
            Files.delete(LengthIndex.fileFor(dir, report.digest(), before));
            LengthIndex.of(report.source(), report.digest(), LengthIndex.settings(OPTIONS, "bundled"), report.lengths(),
                    report.imagePatches()).write(dir);
            assertThrows(IllegalArgumentException.class, () -> loaded.shape(40));

            // a file of the same key holding another number of records: refused, naming both
            var other = LengthIndex.read(file);
            var cut = new LengthIndex(other.key(), other.source(), other.digest(), other.settings(),
                    java.util.Arrays.copyOf(other.lengths(), 39), java.util.Arrays.copyOf(other.imageStart(), 40),
                    java.util.Arrays.copyOf(other.imagePatches(), other.imageStart()[39]));
            cut.write(dir);
            var e = assertThrows(IOException.class, () -> ShapeIndexes.load(dir, records, OPTIONS, "bundled"));
            assertTrue(e.getMessage().contains("39 records") && e.getMessage().contains("re-run stoker validate"), e.getMessage());
        }
    }

    /** A mix: validate's index of each source, concatenated in the order given, is the mix's shapes (records numbered across). */
    @Test
    void aMixTakesEachSourcesIndexInOrder() throws Exception {
        Path a = dataset("a", 40, 3), b = dataset("b", 25, 8);
        Path dir = tmp.resolve("lengths");
        for (Path m : List.of(a, b))
            try (var one = DataSources.open(List.of(new DataSources.Spec(m.toString())), SourceConfig.defaults(), null)) {
                var feed = one.feedSource();
                var report = DatasetValidator.validate(feed.records(), feed, SharedTokenizer.get(),
                        DatasetValidator.Settings.of(OPTIONS, 2));
                LengthIndex.of(report.source(), report.digest(), LengthIndex.settings(OPTIONS, "bundled"), report.lengths(),
                        report.imagePatches()).write(dir);
            }
        var specs = List.of(new DataSources.Spec(a.toString(), 1, null), new DataSources.Spec(b.toString(), 2, null));
        try (var mix = DataSources.open(specs, SourceConfig.defaults(), null)) {
            var records = mix.feedSource().records();
            var loaded = ShapeIndexes.load(dir, records, OPTIONS, "bundled");
            var measured = measure(mix);
            assertEquals(65, loaded.size());
            for (int i = 0; i < 65; i++) assertEquals(measured.shape(i), loaded.shape(i), "record " + i);
            assertEquals(SampleShape.Kind.ERROR, loaded.shape(40 + 5).kind(), "b's record 5, after a's 40");
            Files.delete(LengthIndex.fileFor(dir, java.util.HexFormat.of().formatHex(
                    ((dev.stoker.source.mix.MixedSource.Records) records).sources().get(1).digest()), LengthIndex.settings(OPTIONS, "bundled")));
            assertNull(ShapeIndexes.load(dir, records, OPTIONS, "bundled"), "one source without its index: none for the mix");
        }
    }
}
