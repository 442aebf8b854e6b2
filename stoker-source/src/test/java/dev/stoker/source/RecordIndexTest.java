package dev.stoker.source;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The manifest index: where each record lies, for JSON Lines and JSON arrays, its file, and records read by it. */
@Timeout(120)
class RecordIndexTest {
    @TempDir Path tmp;

    static RecordIndex scan(String text) throws IOException { return scan(text.getBytes(StandardCharsets.UTF_8)); }

    static RecordIndex scan(byte[] bytes) throws IOException { return RecordIndex.scan("m", new ByteArrayInputStream(bytes)); }

    static List<String> records(RecordIndex index, byte[] all) {
        var out = new ArrayList<String>();
        for (int i = 0; i < index.size(); i++)
            out.add(new String(all, (int) index.offset(i), index.length(i), StandardCharsets.UTF_8));
        return out;
    }

    @Test
    void jsonLinesAreTheNonBlankLinesWithoutTheirLineEnds() throws Exception {
        String text = "\uFEFF{\"a\":1}\r\n\n   \t\r\n{\"b\":\"x\\ny\"}\n{\"c\":3}";
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        var index = scan(bytes);
        assertEquals(RecordIndex.Format.JSONL, index.format());
        assertEquals(List.of("\uFEFF{\"a\":1}", "{\"b\":\"x\\ny\"}", "{\"c\":3}"), records(index, bytes));
        assertEquals("m:1", index.id("m", 0));
        assertEquals("m:4", index.id("m", 1));
        assertEquals("m:5", index.id("m", 2));
        assertEquals(bytes.length, index.bytes());
        assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(bytes), index.digest());
    }

    @Test
    void aCrLfSplitBetweenTwoReadsIsOneLineEnd() throws Exception {
        int first = (1 << 20) - 1; // the scanner reads 1 MiB at a time: \r is the first read's last byte
        var sb = new StringBuilder("{\"a\":\"");
        while (sb.length() < first - 2) sb.append('x');
        sb.append("\"}");
        assertEquals(first, sb.length());
        sb.append("\r\n{\"b\":2}\r");
        byte[] bytes = sb.toString().getBytes(StandardCharsets.UTF_8);
        var index = scan(bytes);
        var got = records(index, bytes);
        assertEquals(2, got.size());
        assertTrue(got.get(0).endsWith("\"}"), "no \\r at the end of the first record");
        assertEquals("{\"b\":2}", got.get(1));
    }

    @Test
    void aJsonArrayHasOneRecordPerElementWhateverItHolds() throws Exception {
        String text = """
                  [
                    {"id": "a", "conversations": [{"from": "human", "value": "]}[{ \\" <image>"}], "image": "x.jpg"},
                    {"nested": {"deep": [1, [2, [3]]]}},
                    42,
                    "text"
                  ]
                """;
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        var index = scan(bytes);
        assertEquals(RecordIndex.Format.JSON_ARRAY, index.format());
        assertEquals(List.of("{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"]}[{ \\\" <image>\"}], \"image\": \"x.jpg\"}",
                "{\"nested\": {\"deep\": [1, [2, [3]]]}}", "42", "\"text\""), records(index, bytes));
        assertEquals("m[0]", index.id("m", 0));
        assertEquals("m[3]", index.id("m", 3));
        assertEquals(bytes.length, index.bytes());
        assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(bytes), index.digest());
        assertEquals(0, scan("[]").size());
    }

    @Test
    void aBrokenJsonArrayIsRefusedNamingTheByte() {
        var e = assertThrows(IOException.class, () -> scan("[{\"a\": 1}, {\"b\": }]"));
        assertTrue(e.getMessage().contains("not a well-formed JSON array at byte"), e.getMessage());
        var cut = assertThrows(IOException.class, () -> scan("[{\"a\": 1}, {\"b\": 2}"));
        assertTrue(cut.getMessage().startsWith("m: "), cut.getMessage());
        var more = assertThrows(IOException.class, () -> scan("[{\"a\": 1}] {\"b\": 2}"));
        assertTrue(more.getMessage().contains("more after the JSON array"), more.getMessage());
    }

    @Test
    void anIndexFileRoundTripsAndIsRefusedWhenItIsAnotherKeysOrCutShort() throws Exception {
        byte[] bytes = "{\"a\":1}\n\n{\"b\":2}\n".getBytes(StandardCharsets.UTF_8);
        var index = scan(bytes);
        Path file = tmp.resolve("i.idx");
        index.write(file, "key-1");
        var back = RecordIndex.read(file, "key-1");
        assertEquals(records(index, bytes), records(back, bytes));
        assertEquals("m:3", back.id("m", 1));
        assertArrayEquals(index.digest(), back.digest());
        assertNull(RecordIndex.read(file, "key-2"), "another manifest's (or version's) index");
        byte[] saved = Files.readAllBytes(file);
        Files.write(file, java.util.Arrays.copyOf(saved, saved.length - 3));
        var e = assertThrows(IOException.class, () -> RecordIndex.read(file, "key-1"));
        assertTrue(e.getMessage().contains("its header says"), e.getMessage());
        var array = scan("[{\"a\":1},{\"b\":2}]");
        array.write(file, "k");
        assertEquals("m[1]", RecordIndex.read(file, "k").id("m", 1));
    }

    /**
     * --video auto reads whether the manifest spells "video" (issue 29): found in either format, at any offset — across the
     * scan's 1 MiB reads and its 64 KiB head — and kept by the index file; a manifest without the word, or with a near
     * miss ("vide", "Video"), says no.
     */
    @Test
    void theIndexSaysWhetherTheManifestSpellsVideoAndItsFileKeepsIt() throws Exception {
        assertFalse(scan("{\"image\": \"a.jpg\"}\n{\"text\": \"vide o Video vvideo_\"}\n".replace("vvideo_", "vid eo")).mentionsVideo());
        assertTrue(scan("{\"videos\": [\"a.mp4\"]}\n").mentionsVideo());
        assertTrue(scan("[{\"messages\": [{\"content\": \"<video>Hi\"}]}]").mentionsVideo());
        for (int at : new int[] {64 * 1024 - 2, (1 << 20) - 3, (1 << 20) + 64 * 1024 - 1}) { // split across reads
            var sb = new StringBuilder("{\"t\": \"");
            while (sb.length() < at) sb.append('x');
            sb.append("vvideo\"}\n");
            assertTrue(scan(sb.toString()).mentionsVideo(), "the word at byte " + at);
        }
        Path file = tmp.resolve("v.idx");
        scan("{\"video\": \"a.mp4\"}\n").write(file, "k");
        assertTrue(RecordIndex.read(file, "k").mentionsVideo());
        scan("{\"image\": \"a.jpg\"}\n").write(file, "k");
        assertFalse(RecordIndex.read(file, "k").mentionsVideo());
    }

    @Test
    void recordsAreReadWhereTheIndexSaysAndTheIndexIsCachedUntilTheManifestChanges() throws Exception {
        Path manifest = tmp.resolve("train.json");
        Files.writeString(manifest, "[\n {\"id\": \"a\"},\n {\"id\": \"b\"}\n]\n");
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var records = ManifestRecords.open(source, "train.json", cache);
            assertFalse(records.fromCache());
            assertEquals(2, records.size());
            assertEquals("{\"id\": \"b\"}", new String(records.read(1).get(10, TimeUnit.SECONDS), StandardCharsets.UTF_8));
            assertEquals("train.json[1]", records.id(1));
            var again = ManifestRecords.open(source, "train.json", cache);
            assertTrue(again.fromCache(), "the second open loads the saved index");
            assertEquals("{\"id\": \"a\"}", new String(again.read(0).get(10, TimeUnit.SECONDS), StandardCharsets.UTF_8));
            Files.writeString(manifest, "[{\"id\": \"c\"}, {\"id\": \"d\"}, {\"id\": \"e\"}]");
            var changed = ManifestRecords.open(source, "train.json", cache);
            assertFalse(changed.fromCache(), "a changed manifest is indexed again");
            assertEquals(3, changed.size());
            assertEquals("{\"id\": \"e\"}", new String(changed.read(2).get(10, TimeUnit.SECONDS), StandardCharsets.UTF_8));
        }
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var small = ManifestRecords.open(source, "train.json", new ManifestRecords.IndexCache(tmp.resolve("cache2"), 1 << 20));
            assertFalse(Files.exists(tmp.resolve("cache2")), "a small manifest is not cached");
            assertEquals(3, small.size());
        }
    }

    @Test
    void aCachedIndexIsMappedAndADamagedValueFailsOnlyItsRecordNamingIt() throws Exception {
        Path manifest = tmp.resolve("train.jsonl");
        Files.writeString(manifest, "{\"id\": \"a\"}\n{\"id\": \"b\"}\n{\"id\": \"c\"}\n");
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        try (var source = ObjectSources.open(manifest.toString(), SourceConfig.defaults())) {
            var first = ManifestRecords.open(source, "train.jsonl", cache);
            assertFalse(first.index().mapped(), "a scanned index is held in arrays");
            Path file;
            try (var files = Files.list(tmp.resolve("cache"))) {
                file = files.filter(f -> f.toString().endsWith(".idx")).findFirst().orElseThrow();
            }
            // record 1's offset (after the 56-byte header, the key's length and the key) made to point past the manifest
            var bytes = java.nio.ByteBuffer.wrap(Files.readAllBytes(file)).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            int keyLength = bytes.getInt(56);
            bytes.putLong(60 + keyLength + 8, 1L << 40);
            Files.write(file, bytes.array());
            var again = ManifestRecords.open(source, "train.jsonl", cache);
            assertTrue(again.fromCache() && again.index().mapped(), "the cached index is mapped, not copied");
            assertEquals(0, again.index().bytesPerRecord());
            assertEquals("{\"id\": \"c\"}", new String(again.read(2).get(10, TimeUnit.SECONDS), StandardCharsets.UTF_8));
            var e = assertThrows(java.util.concurrent.ExecutionException.class, () -> again.read(1).get(10, TimeUnit.SECONDS));
            var cause = assertInstanceOf(dev.stoker.core.SampleException.class, e.getCause());
            assertEquals("train.jsonl:2", cause.sampleId());
            assertTrue(cause.getMessage().contains("outside the manifest"), cause.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> again.index().offset(3));
        }
    }
}
