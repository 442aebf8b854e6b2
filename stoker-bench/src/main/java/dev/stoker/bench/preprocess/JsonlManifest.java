package dev.stoker.bench.preprocess;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import dev.stoker.source.RecordIndex;

/**
 * A manifest held in memory as its records' bytes, for tools that read a small data set whole (the
 * benchmarks, the demo): JSON Lines (one record per non-blank line) or a JSON array (one per element),
 * found as {@link RecordIndex} finds them for the feed. Kept as bytes so that each record's UTF-8 is
 * validated (and reported) per sample rather than failing the whole file.
 */
public final class JsonlManifest {
    /** One record: its 1-based line number (or 0-based array position), a stable id ({@code file:line}, {@code file[i]}) and its bytes. */
    public record Line(int lineNumber, String id, byte[] bytes) {}

    private final Path file;
    private final List<Line> lines;

    private JsonlManifest(Path file, List<Line> lines) {
        this.file = file;
        this.lines = List.copyOf(lines);
    }

    public static JsonlManifest read(Path file) throws IOException {
        return new JsonlManifest(file, split(file.getFileName().toString(), Files.readAllBytes(file)));
    }

    /** The records of a manifest held in memory (fetched from an object store), ids {@code name:line} or {@code name[i]}. */
    public static List<Line> split(String name, byte[] all) {
        RecordIndex index;
        try {
            index = RecordIndex.scan(name, new java.io.ByteArrayInputStream(all));
        } catch (IOException e) {
            throw new IllegalArgumentException(e.getMessage(), e);
        }
        var lines = new ArrayList<Line>(index.size());
        for (int i = 0; i < index.size(); i++) {
            int from = (int) index.offset(i);
            lines.add(new Line(index.label(i), index.id(name, i), java.util.Arrays.copyOfRange(all, from, from + index.length(i))));
        }
        return lines;
    }

    public Path file() { return file; }

    /** The folder image paths are relative to. */
    public Path root() { return file.toAbsolutePath().normalize().getParent(); }

    public List<Line> lines() { return lines; }

    public int size() { return lines.size(); }
}
