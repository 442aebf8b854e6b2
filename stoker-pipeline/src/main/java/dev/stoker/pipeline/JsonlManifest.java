package dev.stoker.pipeline;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A JSONL manifest held as raw lines: one sample per non-blank line, kept as bytes so that each
 * line's UTF-8 is validated (and reported) per sample rather than failing the whole file.
 */
public final class JsonlManifest {
    /** One manifest line: its 1-based line number, a stable id ({@code file:line}) and its bytes. */
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

    /** The non-blank lines of a manifest held in memory (fetched from an object store), ids {@code name:line}. */
    public static List<Line> split(String name, byte[] all) {
        var lines = new ArrayList<Line>();
        int start = 0;
        int number = 1;
        for (int i = 0; i <= all.length; i++) {
            if (i == all.length || all[i] == '\n') {
                int end = i;
                if (end > start && all[end - 1] == '\r') end--;
                if (!isBlank(all, start, end)) {
                    byte[] line = java.util.Arrays.copyOfRange(all, start, end);
                    lines.add(new Line(number, name + ":" + number, line));
                }
                start = i + 1;
                number++;
            }
        }
        return lines;
    }

    private static boolean isBlank(byte[] b, int from, int to) {
        for (int i = from; i < to; i++) if (b[i] != ' ' && b[i] != '\t' && b[i] != '\r') return false;
        return true;
    }

    public Path file() { return file; }

    /** The folder image paths are relative to. */
    public Path root() { return file.toAbsolutePath().normalize().getParent(); }

    public List<Line> lines() { return lines; }

    public int size() { return lines.size(); }
}
