package dev.stoker.parquet;

import static dev.stoker.parquet.HfParquet.image;
import static dev.stoker.parquet.HfParquet.list;
import static dev.stoker.parquet.HfParquet.map;
import static dev.stoker.parquet.ParquetRecordsTest.A;
import static dev.stoker.parquet.ParquetRecordsTest.JSON;
import static dev.stoker.parquet.ParquetRecordsTest.failure;
import static dev.stoker.parquet.ParquetRecordsTest.get;
import static dev.stoker.parquet.ParquetRecordsTest.local;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.source.RangedObjectBytes;
import dev.stoker.source.SampleFormat;
import dev.stoker.source.SampleRecords;
import dev.stoker.text.ChatSample;
import dev.stoker.text.Message.Video;
import dev.stoker.text.SampleParser;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Parquet video columns (issue 29), mirroring the image columns: {@code videos} (list of struct&lt;bytes, path&gt;, the
 * datasets {@code Video} feature, or of strings) or {@code video} (one). Carried bytes become the record's
 * {@link SampleRecords.EmbeddedVideo}s, read from memory; a row of paths only names them in its record; a path beside
 * carried bytes is opened by reference; the parser places them, and a parser without video refuses them.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ParquetVideoColumnTest {
    static final SampleParser VIDEO = new SampleParser(SampleParser.Videos.ACCEPT);
    static final byte[] CLIP = "not really an mp4, but bytes".getBytes(StandardCharsets.US_ASCII);
    static final byte[] OTHER = "another container".getBytes(StandardCharsets.US_ASCII);

    @TempDir Path tmp;

    static ChatSample parse(SampleParser p, SampleRecords.Record r, String id) {
        return p.parseRecord(r.json(), id, r.imageNames(), r.videoNames());
    }

    static byte[] readAll(SeekableByteSource s) throws IOException {
        byte[] out = new byte[Math.toIntExact(s.sizeBytes())];
        int at = 0;
        for (int n; at < out.length && (n = s.read(at, MemorySegment.ofArray(out).asSlice(at))) > 0; ) at += n;
        return out;
    }

    static List<Map<String, Object>> turns(String prompt) {
        return List.of(map("role", "user", "content", prompt), map("role", "assistant", "content", "Yes."));
    }

    @Test
    void carriedVideosAreTheRecordsInOrderReadFromMemoryAndPlacedByTheParser() throws Exception {
        Files.write(tmp.resolve("side.mp4"), OTHER);
        Path file = HfParquet.write(tmp.resolve("v.parquet"), HfParquet.STRING_MESSAGES_VIDEOS, List.of(
                map("id", "both", "messages", turns("<image><video>Same?"), "images", list(image(A, "a.jpg")),
                        "videos", list(image(CLIP, "clips/c.mp4"))),
                map("id", "unnamed", "messages", turns("<video> then <video>"), "videos", list(image(CLIP, null), image(OTHER, null))),
                map("id", "paths", "messages", turns("<video>?"), "videos", list(image(null, "clips/p.mp4"))),
                map("id", "mixed", "messages", turns("<video><video>"), "videos", list(image(CLIP, "c.mp4"), image(null, "side.mp4"))),
                map("id", "empty", "messages", turns("Hi"), "videos", list()),
                map("id", "broken", "messages", turns("<video>"), "videos", list(image(null, null)))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "v.parquet", null);
            org.junit.jupiter.api.Assertions.assertTrue(records.mayHoldVideo(), "a video column (--video auto)");
            var both = get(records, 0);
            assertEquals(List.of("a.jpg"), both.imageNames());
            assertEquals(List.of("clips/c.mp4"), both.videoNames());
            assertEquals(CLIP.length, both.videos().getFirst().sizeBytes());
            try (var s = both.videos().getFirst().open()) {
                assertEquals("clips/c.mp4", s.name());
                assertArrayEquals(CLIP, readAll(s));
            }
            assertFalse(JSON.readTree(both.json()).has("videos"), "carried videos are not listed in the record");
            var sample = parse(VIDEO, both, records.id(0));
            assertEquals(List.of("a.jpg"), sample.imagePaths());
            assertEquals(List.of(Video.of("clips/c.mp4")), sample.videos());

            var unnamed = get(records, 1);
            assertEquals(List.of("row1#v0", "row1#v1"), unnamed.videoNames());
            try (var s = unnamed.videos().get(1).open()) {
                assertArrayEquals(OTHER, readAll(s));
            }
            assertEquals(List.of(Video.of("row1#v0"), Video.of("row1#v1")), parse(VIDEO, unnamed, records.id(1)).videos());

            var paths = get(records, 2);
            assertEquals(List.of(), paths.videos(), "paths only: the record names them, the pipeline opens them");
            assertEquals("[\"clips/p.mp4\"]", JSON.readTree(paths.json()).get("videos").toString());
            assertEquals(List.of(Video.of("clips/p.mp4")), parse(VIDEO, paths, records.id(2)).videos());

            var mixed = get(records, 3);
            assertEquals(List.of("c.mp4", "side.mp4"), mixed.videoNames());
            try (var s = mixed.videos().get(1).open()) {
                assertInstanceOf(RangedObjectBytes.class, s, "a path beside carried bytes is opened by reference, in ranges");
                assertArrayEquals(OTHER, readAll(s));
            }

            assertEquals(List.of(), get(records, 4).videos());
            assertEquals("videos[0] has neither bytes nor a path", failure(records, 5).getMessage());

            var byDefault = new SampleParser();
            for (int i : new int[] {0, 2}) {
                var r = get(records, i);
                var e = assertThrows(SampleException.class, () -> parse(byDefault, r, records.id(i)));
                assertEquals(SampleException.Stage.MANIFEST, e.stage());
                assertEquals(i == 0 ? "video is not supported: the record's source carries video clips/c.mp4"
                        : "messages[0].content: <video> placeholder found; video is not supported", e.getMessage());
            }
        }
    }

    @Test
    void typedItemsNameTheOneVideoColumnsVideoAndKeepTheirKeys() throws Exception {
        var content = list(map("type", "video", "fps", 2.0), map("type", "text", "text", "What moves?"));
        Path file = HfParquet.write(tmp.resolve("t.parquet"), HfParquet.TYPED_VIDEO, List.of(
                map("id", "carried", "messages", list(map("role", "user", "content", content),
                        map("role", "assistant", "content", list(map("type", "text", "text", "A disc.")))), "video", image(CLIP, "d.mp4")),
                map("id", "path", "messages", list(map("role", "user", "content", content),
                        map("role", "assistant", "content", list(map("type", "text", "text", "A disc.")))), "video", image(null, "d.mp4"))), 10);
        try (var source = local(file)) {
            var records = SampleFormat.records(source, "t.parquet", null);
            for (int i = 0; i < 2; i++) {
                var r = get(records, i);
                assertEquals(i == 0 ? List.of("d.mp4") : List.of(), r.videoNames());
                assertEquals(List.of(new Video("d.mp4", List.of(), Map.of("fps", 2.0))), parse(VIDEO, r, records.id(i)).videos(), records.id(i));
            }
        }
    }
}
