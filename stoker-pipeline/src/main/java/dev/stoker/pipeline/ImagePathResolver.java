package dev.stoker.pipeline;

import dev.stoker.core.SampleException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;

/**
 * Resolves a sample's image reference against the data set root (the manifest's folder) and
 * refuses any path that leaves it, lexically ({@code ../..}, absolute paths) or through a symlink.
 */
public final class ImagePathResolver {
    private final Path root;
    private final Path realRoot;

    public ImagePathResolver(Path root) {
        this.root = root.toAbsolutePath().normalize();
        Path real;
        try {
            real = this.root.toRealPath();
        } catch (IOException e) {
            real = this.root;
        }
        this.realRoot = real;
    }

    public Path root() { return root; }

    /** The file for {@code reference}; SampleException(FETCH) when it escapes the root or is malformed. */
    public Path resolve(String sampleId, String reference) {
        if (reference == null || reference.isBlank())
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "empty image path");
        String ref = reference.startsWith("file://") ? reference.substring("file://".length()) : reference;
        Path p;
        try {
            p = Path.of(ref);
        } catch (InvalidPathException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "invalid image path '" + reference + "': " + e.getReason());
        }
        Path resolved = (p.isAbsolute() ? p : root.resolve(p)).normalize();
        if (!resolved.startsWith(root))
            throw new SampleException(sampleId, SampleException.Stage.FETCH,
                    "image path '" + reference + "' escapes the data set root " + root);
        if (Files.exists(resolved)) {
            try {
                if (!resolved.toRealPath().startsWith(realRoot))
                    throw new SampleException(sampleId, SampleException.Stage.FETCH,
                            "image path '" + reference + "' leads out of the data set root " + root + " through a symlink");
            } catch (IOException e) {
                throw new SampleException(sampleId, SampleException.Stage.FETCH, "cannot resolve '" + reference + "': " + e.getMessage());
            }
        }
        return resolved;
    }

    /** Reads the referenced file; a missing or unreadable file is a SampleException(FETCH). */
    public byte[] read(String sampleId, String reference) {
        Path p = resolve(sampleId, reference);
        try {
            return Files.readAllBytes(p);
        } catch (java.nio.file.NoSuchFileException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "image not found: " + p);
        } catch (IOException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, "cannot read " + p + ": " + e);
        }
    }
}
