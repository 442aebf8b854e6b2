package dev.stoker.core.io;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Files written whole or not at all: the content goes to a temporary file beside the target, which is then renamed over
 * it in one step. A reader (a resumed job, another process sharing the index cache, {@code stoker report}, a browser on
 * the report page) sees the old file or the new one, never half of one, and a process killed while writing leaves the
 * old file in place. The bytes are not forced to disk: a crash of the machine itself may lose the newest file.
 *
 * <p>The temporary file lies in the target's folder (a rename within one file system is atomic), has a name of its own
 * for each call (two processes writing the same index never write into one temporary file), is made with the
 * folder's usual permissions, and is removed when writing it fails.
 *
 * <pre>{@code
 * AtomicFiles.writeJson(runDir.resolve("job-pipeline.json"), metrics);
 * AtomicFiles.write(indexFile, tmp -> { try (var out = Files.newOutputStream(tmp)) { ... } });
 * }</pre>
 */
public final class AtomicFiles {
    private static final ObjectMapper JSON = new ObjectMapper();

    private AtomicFiles() {}

    /** Writes a file's content into {@code temporary}, an empty file that exists (open it to write, e.g. {@link Files#newOutputStream}). */
    @FunctionalInterface
    public interface Content {
        void writeTo(Path temporary) throws IOException;
    }

    /**
     * Makes {@code file} hold what {@code content} writes, atomically: {@code content} writes a temporary file beside it,
     * which then replaces {@code file}. The folder is made when missing. Returns {@code file}.
     */
    public static Path write(Path file, Content content) throws IOException {
        Path target = file.toAbsolutePath();
        Path dir = target.getParent();
        if (dir != null) Files.createDirectories(dir);
        Path tmp = temporary(target);
        try {
            content.writeTo(tmp);
            Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } finally {
            Files.deleteIfExists(tmp); // gone after the rename; left only when writing or renaming failed
        }
        return file;
    }

    /** {@link #write} of {@code text} as UTF-8. */
    public static Path writeString(Path file, String text) throws IOException {
        return write(file, tmp -> Files.writeString(tmp, text, StandardCharsets.UTF_8));
    }

    /** {@link #write} of {@code value} as pretty-printed JSON (Jackson). */
    public static Path writeJson(Path file, Object value) throws IOException {
        return write(file, tmp -> JSON.writerWithDefaultPrettyPrinter().writeValue(tmp.toFile(), value));
    }

    /** A new empty file beside {@code target}, named after it ({@code report.html.tmp-3f9c…}) and unique to this call. */
    private static Path temporary(Path target) throws IOException {
        while (true) {
            Path tmp = target.resolveSibling(target.getFileName() + ".tmp-" + Long.toHexString(ThreadLocalRandom.current().nextLong()));
            try {
                return Files.createFile(tmp);
            } catch (FileAlreadyExistsException taken) {
                // another writer's: draw another name
            }
        }
    }
}
