package dev.stoker.encode.validate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException.Kind;
import dev.stoker.core.SampleException.Stage;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SourceConfig;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.text.SampleParser;
import dev.stoker.text.TruncationPolicy;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link DatasetValidator} over a small generated manifest: good samples (one image, two, two turns, none), a missing
 * image, a malformed record, an over-long sample filtered by a small --max-seq-len, a JPEG cut inside its header;
 * counts, causes and their examples, the histogram, the length index, and every length equal to the real encoder's
 * {@code input_ids} length.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class DatasetValidatorTest {
    static final int MAX_SEQ_LEN = 400;
    static final EncodeOptions OPTIONS = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withPixels(3136, 200704)
            .withSequenceLimit(MAX_SEQ_LEN, TruncationPolicy.REJECT);

    @TempDir Path tmp;

    /** Index of each kind of record in the manifest {@link #write} makes. */
    static final int SINGLE = 0, MULTI = 1, TURNS = 2, TEXT = 3, MISSING = 4, MALFORMED = 5, LONG = 6, TRUNCATED = 7, SINGLE_PORTRAIT = 8,
            BIG = 9, RECORDS = 10;

    Path write() throws Exception {
        Path images = Files.createDirectories(tmp.resolve("images"));
        Files.write(images.resolve("a.jpg"), SmallJpegDataset.jpeg(320, 240, 1));
        Files.write(images.resolve("b.jpg"), SmallJpegDataset.jpeg(100, 500, 2));
        Files.write(images.resolve("c.jpg"), SmallJpegDataset.jpeg(64, 64, 3));
        Files.write(images.resolve("big.jpg"), SmallJpegDataset.jpeg(1200, 900, 4));
        byte[] whole = SmallJpegDataset.jpeg(300, 200, 5);
        Files.write(images.resolve("cut.jpg"), Arrays.copyOf(whole, 40)); // inside the quantisation tables, before the frame header
        var lines = new String[RECORDS];
        lines[SINGLE] = llava("s0", "\"images/a.jpg\"", "<image>\\nWhat is this?", "A test pattern.");
        lines[MULTI] = llava("s1", "[\"images/a.jpg\", \"images/b.jpg\"]", "<image>\\n<image>\\nCompare them.", "The second is taller.");
        lines[TURNS] = "{\"id\": \"s2\", \"image\": \"images/c.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\nColour?\"},"
                + " {\"from\": \"gpt\", \"value\": \"Grey.\"}, {\"from\": \"human\", \"value\": \"Size?\"}, {\"from\": \"gpt\", \"value\": \"Small.\"}]}";
        lines[TEXT] = "{\"id\": \"s3\", \"conversations\": [{\"from\": \"human\", \"value\": \"Say hello.\"}, {\"from\": \"gpt\", \"value\": \"Hello.\"}]}";
        lines[MISSING] = llava("s4", "\"images/nowhere.jpg\"", "<image>\\nWhat is this?", "Nothing.");
        lines[MALFORMED] = "{\"id\": \"s5\", \"conversations\": [{\"from\": \"human\"";
        lines[LONG] = llava("s6", "\"images/a.jpg\"", "<image>\\n" + "Describe every pixel in turn. ".repeat(80), "No.");
        lines[TRUNCATED] = llava("s7", "\"images/cut.jpg\"", "<image>\\nWhat is this?", "Unknown.");
        lines[SINGLE_PORTRAIT] = "{\"id\": \"s8\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"image\": \"images/b.jpg\"},"
                + " {\"type\": \"text\", \"text\": \"Describe.\"}]}, {\"role\": \"assistant\", \"content\": \"Tall.\"}]}";
        lines[BIG] = llava("s9", "\"images/big.jpg\"", "<image>\\nWhat?", "Noise.");
        return Files.writeString(tmp.resolve("train.jsonl"), String.join("\n", lines) + "\n");
    }

    static String llava(String id, String image, String ask, String answer) {
        return "{\"id\": \"" + id + "\", \"image\": " + image + ", \"conversations\": [{\"from\": \"human\", \"value\": \"" + ask
                + "\"}, {\"from\": \"gpt\", \"value\": \"" + answer + "\"}]}";
    }

    ValidationReport validate(Path manifest, EncodeOptions options, int threads) throws Exception {
        try (var objects = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var source = FeedSource.of(objects, null);
            return DatasetValidator.validate(source.records(), source, SharedTokenizer.get(),
                    new DatasetValidator.Settings(options, threads, 3, 2));
        }
    }

    @Test
    void countsCausesHistogramAndLengthIndex() throws Exception {
        Path manifest = write();
        var report = validate(manifest, OPTIONS, 2);
        assertEquals(RECORDS, report.samples());
        assertEquals(3, report.errors(), report.causes().toString());
        assertEquals(1, report.filtered(), report.causes().toString());
        assertEquals(1 + 2 + 1 + 0 + 1 + 1 + 1 + 1 + 1, report.images(), "images of the records that parse");
        assertEquals(List.of(1L, 7L, 1L), Arrays.stream(report.imagesPerSample()).boxed().toList().subList(0, 3));

        var byStage = new HashMap<Stage, ValidationReport.Cause>();
        for (var c : report.causes()) byStage.put(c.key().stage(), c);
        var missing = byStage.get(Stage.FETCH);
        assertEquals(Kind.ERROR, missing.key().kind());
        assertEquals("file not found", missing.key().reason());
        assertEquals(List.of(MISSING), missing.examples().stream().map(ValidationReport.Example::index).toList());
        assertEquals("s4", missing.examples().getFirst().sampleId());
        assertTrue(missing.examples().getFirst().message().contains("nowhere.jpg"), missing.examples().getFirst().message());
        var malformed = byStage.get(Stage.MANIFEST);
        assertEquals("malformed JSON", malformed.key().reason());
        assertEquals("train.jsonl:" + (MALFORMED + 1), malformed.examples().getFirst().sampleId(), "an unparsed record is named by its line");
        var cut = byStage.get(Stage.DECODE);
        assertEquals(Kind.ERROR, cut.key().kind());
        var cutExample = cut.examples().getFirst();
        assertEquals("s7", cutExample.sampleId());
        assertTrue(cutExample.message().startsWith("s7 (images/cut.jpg): JPEG header truncated"), "names the image: " + cutExample.message());
        var tooLong = byStage.get(Stage.TOKENIZE);
        assertEquals(Kind.FILTERED, tooLong.key().kind());
        assertEquals("over --max-seq-len", tooLong.key().reason());
        assertEquals("s6", tooLong.examples().getFirst().sampleId());
        assertTrue(tooLong.examples().getFirst().message().contains("over the limit of " + MAX_SEQ_LEN));

        int[] lengths = report.lengths();
        assertEquals(LengthIndex.ERROR, lengths[MISSING]);
        assertEquals(LengthIndex.ERROR, lengths[MALFORMED]);
        assertEquals(LengthIndex.ERROR, lengths[TRUNCATED]);
        assertEquals(LengthIndex.FILTERED, lengths[LONG]);
        for (int i : new int[] {SINGLE, MULTI, TURNS, TEXT, SINGLE_PORTRAIT, BIG}) assertTrue(lengths[i] > 0, "record " + i);
        assertTrue(lengths[MULTI] > lengths[SINGLE] && lengths[BIG] > lengths[SINGLE], Arrays.toString(lengths));

        long inHistogram = report.lengthHistogram().stream().mapToLong(ValidationReport.Bucket::count).sum();
        assertEquals(6, inHistogram);
        for (var b : report.lengthHistogram()) {
            long expected = Arrays.stream(lengths).filter(n -> n >= b.from() && (b.to() < 0 || n < b.to())).count();
            assertEquals(expected, b.count(), "bucket " + b);
        }
        int[] kept = Arrays.stream(lengths).filter(n -> n > 0).sorted().toArray();
        assertEquals(kept[kept.length - 1], report.lengthQuantile(1.0));
        assertEquals(kept[2], report.lengthQuantile(0.5), "nearest rank: the 3rd of 6");

        var json = new ObjectMapper().readTree(report.summaryJson(null));
        assertEquals(RECORDS, json.get("samples").asInt());
        assertEquals(3, json.get("errors").asInt());
        assertEquals(1, json.get("filtered").asInt());
        assertEquals(kept[kept.length - 1], json.get("tokens").get("max").asInt());
        assertTrue(json.get("samples_per_s").asDouble() > 0);

        // the length index: written, read back, keyed by the manifest and the settings
        var settings = LengthIndex.settings(OPTIONS, "bundled");
        var index = LengthIndex.of(report.source(), report.digest(), settings, lengths, report.imagePatches());
        Path file = index.write(tmp.resolve("lengths"));
        assertEquals(LengthIndex.fileFor(tmp.resolve("lengths"), report.digest(), settings), file);
        var back = LengthIndex.read(file);
        assertTrue(Arrays.equals(lengths, back.lengths()));
        assertEquals(settings.toString(), back.settings().toString());
        assertEquals(report.digest(), back.digest());
        for (int i = 0; i < RECORDS; i++) {
            int[] expected = report.imagePatches()[i] == null ? new int[0] : report.imagePatches()[i];
            assertTrue(Arrays.equals(expected, back.imagePatches(i)), "record " + i + ": " + Arrays.toString(back.imagePatches(i)));
        }
        assertEquals(2, back.images(MULTI));
        assertEquals(0, back.images(TEXT));
        assertEquals(0, back.images(MISSING), "an error keeps no images");
        assertEquals(0, back.images(LONG), "nor does a filtered record");
        // the layout, as NumPy reads it: per record (tokens, images, patches, videos, clips), then every image's patches
        byte[] raw = Files.readAllBytes(file);
        assertEquals("STKLEN04", new String(raw, 0, 8, StandardCharsets.US_ASCII));
        var le = java.nio.ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int h = le.getInt(8);
        int table = 12 + h;
        assertEquals(0, table % 8, "the table starts 8-aligned");
        assertEquals(lengths[MULTI], le.getInt(table + 20 * MULTI));
        assertEquals(2, le.getInt(table + 20 * MULTI + 4));
        assertEquals(back.patches(MULTI), le.getInt(table + 20 * MULTI + 8));
        assertEquals(0, le.getInt(table + 20 * MULTI + 12), "no videos");
        int imagesBefore = 0;
        for (int i = 0; i < MULTI; i++) imagesBefore += le.getInt(table + 20 * i + 4);
        assertEquals(back.imagePatches(MULTI)[1], le.getInt(table + 20 * RECORDS + 4 * (imagesBefore + 1)), "the second image of MULTI");
        int images = index.imagePatches().length;
        assertEquals(6, images, "SINGLE, MULTI (2), TURNS, SINGLE_PORTRAIT, BIG");
        assertEquals(table + 20 * RECORDS + 4 * images, raw.length);
        assertNotEquals(file, LengthIndex.fileFor(tmp.resolve("lengths"), report.digest(), LengthIndex.settings(OPTIONS.withPixels(3136, 50176), "bundled")),
                "other pixel bounds, another index");
        assertNotEquals(file, LengthIndex.fileFor(tmp.resolve("lengths"), "00" + report.digest().substring(2), settings), "another manifest, another index");
        Files.write(file, Arrays.copyOf(raw, raw.length - 2));
        var e = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class, () -> LengthIndex.read(file));
        assertTrue(e.getMessage().contains("records"), e.getMessage());
        byte[] v1 = raw.clone(); // a file of format 1 (lengths only): refused, with what to do
        System.arraycopy("STKLEN01".getBytes(StandardCharsets.US_ASCII), 0, v1, 0, 8);
        Files.write(file, v1);
        var old = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class, () -> LengthIndex.read(file));
        assertTrue(old.getMessage().contains("re-run stoker validate"), old.getMessage());
        le.putInt(table + 20 * TEXT + 4, 7); // a record claiming more images than the index holds
        Files.write(file, raw);
        var claims = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class, () -> LengthIndex.read(file));
        assertTrue(claims.getMessage().contains("images"), claims.getMessage());
    }

    /** Each kept record's length is the real encoder's input_ids length: two pixel caps, no limit, truncation; one thread or two, the same. */
    @Test
    void lengthsEqualTheEncodersSequenceLengths() throws Exception {
        Path manifest = write();
        var lines = Files.readAllLines(manifest);
        for (var options : List.of(OPTIONS, OPTIONS.withPixels(3136, 50176), OPTIONS.withSequenceLimit(0, TruncationPolicy.REJECT),
                OPTIONS.withSequenceLimit(120, TruncationPolicy.TRUNCATE))) {
            var report = validate(manifest, options, 2);
            assertTrue(Arrays.equals(report.lengths(), validate(manifest, options, 1).lengths()), "one thread or two");
            var encoder = new SampleEncoder(options, SharedTokenizer.get());
            var parser = new SampleParser();
            int checked = 0;
            for (int i : new int[] {SINGLE, MULTI, TURNS, TEXT, SINGLE_PORTRAIT, BIG, LONG}) {
                var sample = parser.parseLine(lines.get(i).getBytes(StandardCharsets.UTF_8), "line" + i);
                var images = new HashMap<String, byte[]>();
                for (String ref : sample.imagePaths()) images.put(ref, Files.readAllBytes(tmp.resolve(ref)));
                if (i == LONG && options.maxSequenceLength() > 0 && options.truncation() == TruncationPolicy.REJECT) continue; // filtered: checked above
                var encoded = encoder.encode(sample, images);
                assertEquals(encoded.inputIds().length, report.lengths()[i], "record " + i + " under " + options.vision());
                long[] grid = encoded.imageGridThw();
                int[] patches = report.imagePatches()[i] == null ? new int[0] : report.imagePatches()[i];
                assertEquals(grid.length / 3, patches.length, "images kept, record " + i);
                for (int k = 0; k < patches.length; k++)
                    assertEquals(grid[3 * k] * grid[3 * k + 1] * grid[3 * k + 2], patches[k], "record " + i + " image " + k + ": t·h·w");
                checked++;
            }
            assertTrue(checked >= 6);
        }
    }

    /** A file that is not a data set: an IOException naming it, no report. */
    @Test
    void anUnreadableSourceFails() {
        var missing = tmp.resolve("nothing.jsonl");
        var e = org.junit.jupiter.api.Assertions.assertThrows(Exception.class, () -> validate(missing, OPTIONS, 1));
        assertTrue(String.valueOf(e.getMessage()).contains("nothing.jsonl"), String.valueOf(e));
    }
}
