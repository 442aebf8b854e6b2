package dev.stoker.bench.preprocess;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The in-memory manifest of the tools (bench preprocess, the demo) reads JSON arrays as the feed does, not as one bad line each. */
@Timeout(120)
class JsonlManifestTest {
    @Test
    void aJsonArrayIsOneRecordPerElementAndJsonLinesOnePerLine() {
        var array = JsonlManifest.split("t.json", "[\n {\"id\": 1},\n {\"id\": 2}\n]".getBytes(StandardCharsets.UTF_8));
        assertEquals(List.of("t.json[0]", "t.json[1]"), array.stream().map(JsonlManifest.Line::id).toList());
        assertEquals("{\"id\": 2}", new String(array.get(1).bytes(), StandardCharsets.UTF_8));
        var lines = JsonlManifest.split("t.jsonl", "{\"id\": 1}\r\n\n{\"id\": 2}".getBytes(StandardCharsets.UTF_8));
        assertEquals(List.of("t.jsonl:1", "t.jsonl:3"), lines.stream().map(JsonlManifest.Line::id).toList());
        assertEquals(List.of(1, 3), lines.stream().map(JsonlManifest.Line::lineNumber).toList());
        assertEquals("{\"id\": 1}", new String(lines.get(0).bytes(), StandardCharsets.UTF_8));
        assertThrows(IllegalArgumentException.class, () -> JsonlManifest.split("t.json", "[{\"id\": 1},".getBytes(StandardCharsets.UTF_8)));
    }
}
