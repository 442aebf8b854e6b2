package dev.stoker.parquet;

import static dev.stoker.parquet.HfParquet.image;
import static dev.stoker.parquet.HfParquet.list;
import static dev.stoker.parquet.HfParquet.map;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.SampleException;
import dev.stoker.source.ObjectSource;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SampleRecords;
import dev.stoker.source.SourceConfig;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.ChatSample;
import dev.stoker.text.Message;
import dev.stoker.text.SampleParser;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ParquetRecordsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final long UNBOUNDED = Long.MAX_VALUE;

    @TempDir Path tmp;

    static byte[] jpeg(String id) throws IOException { return Files.readAllBytes(Vectors.get().inputImage(id)); }

    static final byte[] A = bytes("p01_photo_grace_hopper");
    static final byte[] B = bytes("p03_small_40x36");

    private static byte[] bytes(String id) {
        try {
            return jpeg(id);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    static ObjectSource local(Path file) { return ObjectSources.open(file.toString(), SourceConfig.builder().build()); }

    static SampleRecords.Record get(SampleRecords records, int i) throws Exception {
        return records.record(i).get(30, TimeUnit.SECONDS);
    }

    static SampleException failure(SampleRecords records, int i) {
        var e = assertThrows(ExecutionException.class, () -> records.record(i).get(30, TimeUnit.SECONDS));
        return assertInstanceOf(SampleException.class, e.getCause(), "record " + i);
    }

    static ChatSample parse(SampleRecords.Record r, String id) {
        return new SampleParser().parseRecord(r.json(), id, r.imageNames(), r.videoNames(), r.audioNames());
    }

    static List<String> imageRefs(ChatSample s) {
        var out = new ArrayList<String>();
        for (var m : s.messages()) for (var p : m.parts()) if (p instanceof Message.Image im) out.add(im.ref());
        return out;
    }

    @Test
    void typedContentWithBareImageItemsTakesTheImagesColumnInOrder() throws Exception {
        Path file = HfParquet.write(tmp.resolve("train.parquet"), HfParquet.TYPED, List.of(
                map("id", "t0", "source", "ignored", "messages", list(
                        map("role", "user", "content", list(
                                map("type", "image", "index", 0L),
                                map("type", "text", "text", "Compare"),
                                map("type", "image", "index", 1L))),
                        map("role", "assistant", "content", list(map("type", "text", "text", "The first is larger.")))),
                        "images", list(image(A, "a.jpg"), image(B, "b.jpg")))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "train.parquet", null);
            org.junit.jupiter.api.Assertions.assertFalse(records.mayHoldVideo(), "no video column: no video (--video auto)");
            assertInstanceOf(ParquetRecords.class, records, "found by the URI");
            assertEquals(1, records.size());
            assertEquals("train.parquet:0", records.id(0));
            var r = get(records, 0);
            assertEquals(List.of("a.jpg", "b.jpg"), r.images().stream().map(SampleRecords.Embedded::name).toList());
            assertArrayEquals(A, r.images().get(0).bytes());
            assertArrayEquals(B, r.images().get(1).bytes());
            JsonNode json = JSON.readTree(r.json());
            assertEquals("t0", json.get("id").asText());
            assertFalse(json.has("source"), "other columns are not read");
            assertFalse(json.has("images"), "embedded images are not listed");
            assertFalse(json.at("/messages/0/content/1").has("index"), "null fields are left out");
            assertFalse(json.at("/messages/0/content/0").has("text"), "a null text is left out (it would make a text item)");
            var sample = parse(r, records.id(0));
            assertEquals("t0", sample.id());
            assertEquals(List.of("a.jpg", "b.jpg"), sample.imagePaths());
            assertEquals(List.of("a.jpg", "b.jpg"), imageRefs(sample));
        }
    }

    @Test
    void stringContentWithPlaceholdersAndUnnamedImages() throws Exception {
        Path file = HfParquet.write(tmp.resolve("s.parquet"), HfParquet.STRING_MESSAGES, List.of(
                map("id", "s0", "messages", list(map("role", "user", "content", "<image>What is this? <image>"),
                        map("role", "assistant", "content", "Two photos.")),
                        "images", list(image(A, null), image(B, null))),
                map("messages", list(map("role", "user", "content", "<image><image>"), map("role", "assistant", "content", "x")),
                        "images", list(image(A, "same.jpg"), image(B, "same.jpg")))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "s.parquet", null);
            var r = get(records, 0);
            assertEquals(List.of("row0#0", "row0#1"), r.images().stream().map(SampleRecords.Embedded::name).toList());
            var sample = parse(r, records.id(0));
            assertEquals(List.of("row0#0", "row0#1"), sample.imagePaths());
            var text = sample.messages().get(0).parts();
            assertEquals(3, text.size(), "image, text, image: " + text);
            var dup = get(records, 1);
            assertEquals(List.of("row1#0", "row1#1"), dup.images().stream().map(SampleRecords.Embedded::name).toList(), "paths not unique in the row");
            assertEquals("s.parquet:1", parse(dup, records.id(1)).id(), "no id column value: the record's position");
        }
    }

    @Test
    void conversationsWithOneImageStructAndAnIntegerId() throws Exception {
        Path file = HfParquet.write(tmp.resolve("c.parquet"), HfParquet.CONVERSATIONS_IMAGE, List.of(
                map("id", 7L, "conversations", list(map("from", "human", "value", "<image>\nWhat is it?"), map("from", "gpt", "value", "A woman.")),
                        "image", image(A, "photos/hopper.jpg")),
                map("id", 8L, "conversations", list(map("from", "human", "value", "Hi"), map("from", "gpt", "value", "Hello.")))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "c.parquet", null);
            var r = get(records, 0);
            assertEquals(1, r.images().size());
            assertEquals("photos/hopper.jpg", r.images().get(0).name());
            var sample = parse(r, records.id(0));
            assertEquals("7", sample.id());
            assertEquals(List.of("photos/hopper.jpg"), sample.imagePaths());
            assertTrue(sample.messages().get(0).parts().get(1) instanceof Message.Text t && t.text().equals("What is it?"), "LLaVA rule: stripped");
            var textOnly = get(records, 1);
            assertTrue(textOnly.images().isEmpty());
            assertEquals(List.of(), new SampleParser().parseLine(textOnly.json(), records.id(1)).imagePaths());
        }
    }

    @Test
    void imagesWithoutBytesStayReferencesAndMixedRowsFetchThem() throws Exception {
        Files.write(tmp.resolve("b.jpg"), B);
        Path file = HfParquet.write(tmp.resolve("r.parquet"), HfParquet.TYPED, List.of(
                map("messages", list(map("role", "user", "content", list(map("type", "image"), map("type", "text", "text", "What?"))),
                        map("role", "assistant", "content", list(map("type", "text", "text", "A photo.")))),
                        "images", list(image(null, "b.jpg"))),
                map("messages", list(map("role", "user", "content", list(map("type", "image"), map("type", "image"))),
                        map("role", "assistant", "content", list(map("type", "text", "text", "Two.")))),
                        "images", list(image(A, "a.jpg"), image(null, "b.jpg")))), 10);
        var strings = HfParquet.write(tmp.resolve("rs.parquet"), HfParquet.STRING_MESSAGES, List.of(
                map("messages", list(map("role", "user", "content", "<image>Hi"), map("role", "assistant", "content", "x")),
                        "images", list(image(null, "b.jpg")))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "r.parquet", null);
            var refOnly = get(records, 0);
            assertTrue(refOnly.images().isEmpty(), "nothing embedded: the pipeline fetches the reference");
            assertEquals("b.jpg", JSON.readTree(refOnly.json()).at("/messages/0/content/0/image").asText());
            assertEquals(List.of("b.jpg"), new SampleParser().parseLine(refOnly.json(), "x").imagePaths());
            var mixed = get(records, 1);
            assertEquals(List.of("a.jpg", "b.jpg"), mixed.images().stream().map(SampleRecords.Embedded::name).toList());
            assertArrayEquals(A, mixed.images().get(0).bytes());
            assertArrayEquals(B, mixed.images().get(1).bytes(), "the path was fetched from the source");
        }
        try (var source = local(strings)) {
            var r = get(SampleFormat.records(source, "rs.parquet", null), 0);
            assertTrue(r.images().isEmpty());
            assertEquals("[\"b.jpg\"]", JSON.readTree(r.json()).get("images").toString());
        }
    }

    @Test
    void malformedRowsFailAloneNamingTheRecord() throws Exception {
        Path file = HfParquet.write(tmp.resolve("bad.parquet"), HfParquet.STRING_MESSAGES, List.of(
                map("id", "ok0", "messages", list(map("role", "user", "content", "hi"), map("role", "assistant", "content", "x"))),
                map("id", "nullMessages"),
                map("id", "nullTurn", "messages", list(map("role", "user", "content", "hi"), null)),
                map("id", "emptyImage", "messages", list(map("role", "user", "content", "<image>")), "images", list(image(null, null))),
                map("id", "nullImage", "messages", list(map("role", "user", "content", "<image>")), "images", list((Object) null)),
                map("id", "ok5", "messages", list(map("role", "user", "content", "hi"), map("role", "assistant", "content", "y")))), 100);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "bad.parquet", null);
            assertEquals(6, records.size());
            var e1 = failure(records, 1);
            assertEquals(SampleException.Stage.MANIFEST, e1.stage());
            assertEquals("bad.parquet:1", e1.sampleId());
            assertTrue(e1.getMessage().contains("'messages' column is null"), e1.getMessage());
            var e2 = failure(records, 2);
            assertEquals("bad.parquet:2", e2.sampleId());
            assertTrue(e2.getMessage().contains("messages[1] is null"), e2.getMessage());
            assertTrue(failure(records, 3).getMessage().contains("images[0] has neither bytes nor a path"));
            assertTrue(failure(records, 4).getMessage().contains("images[0] is null"));
            assertEquals("ok0", JSON.readTree(get(records, 0).json()).get("id").asText());
            assertEquals("ok5", JSON.readTree(get(records, 5).json()).get("id").asText());
            assertEquals(1, ((ParquetRecords) records).rowGroupReads(), "one row group, read once for all six");
        }
    }

    /** messages (string content), audio: struct<bytes, path> as HF's Audio feature writes it, videos: list<string>. */
    static final org.apache.parquet.schema.MessageType WITH_MEDIA = org.apache.parquet.schema.MessageTypeParser.parseMessageType("message schema {"
            + " optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional binary role (STRING); optional binary content (STRING); } } }"
            + " optional group audio { optional binary bytes; optional binary path (STRING); }"
            + " optional group videos (LIST) { repeated group list { optional binary element (STRING); } }"
            + "}");

    /**
     * An audio column is read (issue 32): a clip's bytes are carried with the record, a clip named by a path only is listed
     * in it; a parser without audio (a Qwen-VL processor's) refuses both, with its usual words. Before, the columns were not
     * read and the row was served as a text-only sample. A video column is read, and refused by a parser without video.
     * Empty or null media columns are not refusals.
     */
    @Test
    void aRowWithAudioOrVideoIsReadAndRefusedByAParserWithoutThem() throws Exception {
        var turns = list(map("role", "user", "content", "<audio>What is said?"), map("role", "assistant", "content", "Hello."));
        var plain = list(map("role", "user", "content", "Hi"), map("role", "assistant", "content", "Hello."));
        Path file = HfParquet.write(tmp.resolve("av.parquet"), WITH_MEDIA, List.of(
                map("id", "wav", "messages", turns, "audio", map("bytes", new byte[] {'R', 'I', 'F', 'F'}, "path", "a.wav")),
                map("id", "path", "messages", turns, "audio", map("bytes", null, "path", "a.wav")),
                map("id", "video", "messages", plain, "videos", list("v.mp4")),
                map("id", "nullAudio", "messages", plain, "audio", map("bytes", null, "path", null), "videos", list()),
                map("id", "none", "messages", plain)), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "av.parquet", null);
            var carried = get(records, 0);
            assertEquals(List.of("a.wav"), carried.audioNames());
            assertArrayEquals(new byte[] {'R', 'I', 'F', 'F'}, carried.audios().getFirst().bytes());
            var named = get(records, 1);
            assertTrue(named.audios().isEmpty());
            assertEquals("[\"a.wav\"]", JSON.readTree(named.json()).get("audios").toString(), "a path only: named by the record");
            for (int i : new int[] {0, 1}) {
                var r = get(records, i);
                var e = assertThrows(SampleException.class, () -> parse(r, records.id(i)));
                assertEquals(SampleException.Stage.MANIFEST, e.stage());
                assertTrue(e.getMessage().contains("audio is not supported by the Qwen-VL processors"), e.getMessage());
            }
            assertEquals("audio is not supported by the Qwen-VL processors: the record's source carries audio a.wav",
                    assertThrows(SampleException.class, () -> parse(carried, records.id(0))).getMessage());
            var video = get(records, 2); // a video column is read (ParquetVideoColumnTest): the parser serves or refuses it
            assertEquals("[\"v.mp4\"]", JSON.readTree(video.json()).get("videos").toString());
            assertEquals("field 'videos': video is not supported",
                    assertThrows(SampleException.class, () -> parse(video, records.id(2))).getMessage());
            for (int i : new int[] {3, 4}) {
                var r = get(records, i);
                assertEquals(List.of("id", "messages"), names(JSON.readTree(r.json()).fieldNames()), "the media columns are not copied");
                assertEquals(Message.text(Message.Role.ASSISTANT, "Hello."), parse(r, records.id(i)).messages().get(1));
            }
        }
    }

    private static List<String> names(java.util.Iterator<String> names) {
        var out = new ArrayList<String>();
        names.forEachRemaining(out::add);
        return out;
    }

    static List<Map<String, Object>> rows(int from, int n) {
        var out = new ArrayList<Map<String, Object>>();
        for (int i = from; i < from + n; i++)
            out.add(map("id", "r" + i, "messages", list(map("role", "user", "content", "<image>Row " + i), map("role", "assistant", "content", "Answer " + i)),
                    "images", list(image((i % 2 == 0 ? A : B), "img" + i + ".jpg"))));
        return out;
    }

    static String idOf(SampleRecords.Record r) throws IOException { return JSON.readTree(r.json()).get("id").asText(); }

    @Test
    void rowGroupsAndFilesByGlobAndBraces() throws Exception {
        HfParquet.write(tmp.resolve("train-00000.parquet"), HfParquet.STRING_MESSAGES, rows(0, 7), 3); // groups 3, 3, 1
        HfParquet.write(tmp.resolve("train-00001.parquet"), HfParquet.STRING_MESSAGES, rows(7, 5), 2); // 2, 2, 1
        HfParquet.write(tmp.resolve("train-00002.parquet"), HfParquet.STRING_MESSAGES, rows(12, 4), 4); // 4
        Files.writeString(tmp.resolve("train-notes.txt"), "not parquet");
        for (String pattern : List.of("train-*.parquet", "train-{00000..00002}.parquet", "train-0000{0,1,2}.parquet")) {
            try (var source = local(tmp.resolve(pattern))) {
                var records = (ParquetRecords) SampleFormat.records(source, pattern, null);
                assertEquals(List.of("train-00000.parquet", "train-00001.parquet", "train-00002.parquet"), records.files(), pattern);
                assertEquals(16, records.size());
                assertEquals(7, records.rowGroups());
                assertEquals("train-00000.parquet:6", records.id(6));
                assertEquals("train-00001.parquet:0", records.id(7));
                assertEquals("train-00002.parquet:3", records.id(15));
                for (int i = 0; i < 16; i++) {
                    var r = get(records, i);
                    assertEquals("r" + i, idOf(r), pattern + " record " + i);
                    assertArrayEquals(i % 2 == 0 ? A : B, r.images().get(0).bytes());
                    assertEquals("img" + i + ".jpg", r.images().get(0).name());
                }
                assertEquals(7, records.rowGroupReads(), "in order: each group once");
            }
        }
        try (var source = local(tmp.resolve("train-{00000..00003}.parquet"))) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(source, "x", null));
            assertTrue(e.getMessage().contains("train-00003.parquet"), e.getMessage());
        }
        try (var source = local(tmp.resolve("none-*.parquet"))) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(source, "x", null));
            assertTrue(e.getMessage().contains("no file matches"), e.getMessage());
        }
    }

    /** A shuffled order (the schedule's kind: a permutation of all rows) over 8 row groups of 5 rows. */
    static List<Integer> shuffled(int n, long seed) {
        var order = new ArrayList<Integer>();
        for (int i = 0; i < n; i++) order.add(i);
        Collections.shuffle(order, new Random(seed));
        return order;
    }

    @Test
    void aShuffledReadReadsEachRowGroupOnceWhenTheyFitTheCache() throws Exception {
        Path file = HfParquet.write(tmp.resolve("shuffle.parquet"), HfParquet.STRING_MESSAGES, rows(0, 40), 5);
        try (var source = local(file)) {
            var records = ParquetFormat.open(source, "shuffle.parquet", UNBOUNDED);
            assertEquals(8, records.rowGroups());
            long footerRanges = records.rangeReads();
            assertEquals(1, footerRanges, "the footer and its length in one ranged read");
            for (int i : shuffled(40, 1)) assertEquals("r" + i, idOf(get(records, i)));
            assertEquals(8, records.rowGroupReads(), "40 records, 8 row group reads");
            assertTrue(records.cachedBytes() > 40L * (A.length + B.length) / 2, "all eight kept: " + records.cachedBytes());
            // concurrent records of one group share its read
            var again = ParquetFormat.open(source, "shuffle.parquet", UNBOUNDED);
            var futures = new ArrayList<java.util.concurrent.CompletableFuture<SampleRecords.Record>>();
            for (int i = 0; i < 40; i++) futures.add(again.record(i));
            for (int i = 0; i < 40; i++) assertEquals("r" + i, idOf(futures.get(i).get(30, TimeUnit.SECONDS)));
            assertEquals(8, again.rowGroupReads());
        }
    }

    @Test
    void aCacheTooSmallRereadsGroupsAsLruSays() throws Exception {
        Path file = HfParquet.write(tmp.resolve("small.parquet"), HfParquet.STRING_MESSAGES, rows(0, 40), 5);
        var order = shuffled(40, 2);
        try (var source = local(file)) {
            var records = ParquetFormat.open(source, "small.parquet", 0); // keeps the newest group only
            int expected = 0, last = -1;
            for (int i : order) {
                assertEquals("r" + i, idOf(get(records, i)));
                if (i / 5 != last) expected++;
                last = i / 5;
            }
            assertEquals(expected, records.rowGroupReads(), "a read per change of group");
            assertTrue(expected > 8 && expected <= 40, "re-read, and never more than once a record: " + expected);
            var sequential = ParquetFormat.open(source, "small.parquet", 0);
            for (int i = 0; i < 40; i++) get(sequential, i);
            assertEquals(8, sequential.rowGroupReads(), "in file order a one-group cache suffices");
        }
    }

    @Test
    void everySupportedCodecReadsBack() throws Exception {
        var rows = rows(0, 6);
        for (var codec : List.of(CompressionCodecName.UNCOMPRESSED, CompressionCodecName.SNAPPY, CompressionCodecName.ZSTD,
                CompressionCodecName.GZIP, CompressionCodecName.LZ4_RAW)) {
            Path file = HfParquet.write(tmp.resolve("c-" + codec + ".parquet"), HfParquet.STRING_MESSAGES, rows, 4, codec);
            try (var source = local(file)) {
                var records = SampleFormat.records(source, "c.parquet", null);
                for (int i = 0; i < 6; i++) {
                    var r = get(records, i);
                    assertEquals("r" + i, idOf(r), codec + " record " + i);
                    assertArrayEquals(i % 2 == 0 ? A : B, r.images().get(0).bytes(), codec.toString());
                }
            }
        }
    }

    @Test
    void filesThatAreNotInTheLayoutAreRefusedAtOpen() throws Exception {
        Files.writeString(tmp.resolve("text.parquet"), "this is not a parquet file at all");
        try (var source = local(tmp.resolve("text.parquet"))) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(source, "text.parquet", null));
            assertTrue(e.getMessage().contains("text.parquet"), e.getMessage());
        }
        var schema = org.apache.parquet.schema.MessageTypeParser.parseMessageType("message m { optional binary text (STRING); }");
        HfParquet.write(tmp.resolve("plain.parquet"), schema, List.of(map("text", "hello")), 10);
        try (var source = local(tmp.resolve("plain.parquet"))) {
            var e = assertThrows(IOException.class, () -> SampleFormat.records(source, "plain.parquet", null));
            assertTrue(e.getMessage().contains("no 'messages' or 'conversations' column (columns: text)"), e.getMessage());
        }
    }

    @Test
    void digestFollowsNamesSizesAndVersions() throws Exception {
        Path file = HfParquet.write(tmp.resolve("d.parquet"), HfParquet.STRING_MESSAGES, rows(0, 3), 10);
        byte[] first;
        try (var source = local(file)) {
            first = SampleFormat.records(source, "d.parquet", null).digest();
            assertArrayEquals(first, SampleFormat.records(source, "d.parquet", null).digest(), "stable");
        }
        HfParquet.write(file, HfParquet.STRING_MESSAGES, rows(1, 3), 10);
        Files.setLastModifiedTime(file, java.nio.file.attribute.FileTime.fromMillis(System.currentTimeMillis() + 5000));
        try (var source = local(file)) {
            assertNotEquals(HexOf.hex(first), HexOf.hex(SampleFormat.records(source, "d.parquet", null).digest()));
        }
    }

    @Test
    void theTestsRunWithoutHadoop() {
        assertThrows(ClassNotFoundException.class, () -> Class.forName("org.apache.hadoop.conf.Configuration"),
                "the reader must work on the class path `stoker serve` has, which has no Hadoop");
    }

    static final class HexOf {
        static String hex(byte[] b) { return java.util.HexFormat.of().formatHex(b); }
    }
}
