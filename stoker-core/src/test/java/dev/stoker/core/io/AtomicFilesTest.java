package dev.stoker.core.io;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** A file written through {@link AtomicFiles} is the old one or the new one, whole, and no temporary file is left behind. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AtomicFilesTest {
    @TempDir Path tmp;

    private List<String> names() throws IOException {
        try (Stream<Path> files = Files.list(tmp)) {
            return files.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    @Test
    void whileTheNewFileIsWrittenReadersSeeTheOldOneWhole() throws IOException {
        Path file = tmp.resolve("report.html");
        Files.writeString(file, "old");
        var seen = new AtomicReference<String>();
        assertSame(file, AtomicFiles.write(file, t -> {
            Files.writeString(t, "new, half");
            seen.set(Files.readString(file));
            Files.writeString(t, "new");
        }));
        assertEquals("old", seen.get(), "the target is untouched until the rename");
        assertEquals("new", Files.readString(file));
        assertEquals(List.of("report.html"), names(), "the temporary file was renamed, not copied");
    }

    @Test
    void aFailedWriteLeavesTheOldFileAndNoTemporary() throws IOException {
        Path file = tmp.resolve("lengths.bin");
        Files.writeString(file, "old");
        var e = assertThrows(IOException.class, () -> AtomicFiles.write(file, t -> {
            Files.writeString(t, "half of it");
            throw new IOException("disk full");
        }));
        assertEquals("disk full", e.getMessage());
        assertEquals("old", Files.readString(file));
        assertEquals(List.of("lengths.bin"), names());
    }

    @Test
    void twoWritersOfOneFileEachWriteTheirOwnTemporary() throws IOException {
        Path file = tmp.resolve("index.bin");
        var outer = new AtomicReference<Path>();
        var inner = new AtomicReference<Path>();
        AtomicFiles.write(file, t -> {
            outer.set(t);
            Files.writeString(t, "first");
            AtomicFiles.write(file, u -> { // another writer of the same file, while the first one writes
                inner.set(u);
                Files.writeString(u, "second");
            });
            assertEquals("first", Files.readString(t), "the second writer did not write into the first one's file");
        });
        assertNotEquals(outer.get(), inner.get());
        assertTrue(outer.get().getFileName().toString().startsWith("index.bin.tmp-"), outer.get().toString());
        assertEquals("first", Files.readString(file), "the last rename wins, whole");
        assertEquals(List.of("index.bin"), names());
    }

    @Test
    void jsonAndTextAreWrittenIntoAFolderMadeForThem() throws IOException {
        Path json = tmp.resolve("run/job-pipeline.json");
        AtomicFiles.writeJson(json, Map.of("batches", 3));
        assertEquals(3, new ObjectMapper().readTree(json.toFile()).get("batches").asInt());
        assertTrue(Files.readString(json).contains("\n"), "pretty-printed");
        Path text = tmp.resolve("run/report.html");
        AtomicFiles.writeString(text, "<p>é</p>");
        assertEquals("<p>é</p>", Files.readString(text));
        try (Stream<Path> files = Files.list(tmp.resolve("run"))) {
            assertEquals(2, files.count());
        }
    }
}
