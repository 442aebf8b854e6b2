package dev.stoker.node;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/** The files a run leaves: written whole or not at all, so that a reader never sees half a file. */
public final class RunFiles {
    private static final ObjectMapper JSON = new ObjectMapper();

    private RunFiles() {}

    /** Writes {@code value} as pretty JSON to {@code file} atomically (a temporary file beside it, then a rename). */
    public static void writeJson(Path file, Object value) throws IOException {
        Path abs = file.toAbsolutePath();
        if (abs.getParent() != null) Files.createDirectories(abs.getParent());
        Path tmp = abs.resolveSibling(abs.getFileName() + ".tmp");
        JSON.writerWithDefaultPrettyPrinter().writeValue(tmp.toFile(), value);
        Files.move(tmp, abs, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }
}
