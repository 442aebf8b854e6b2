package dev.stoker.source;

import dev.stoker.core.SampleException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Turns a manifest's image reference into the object to read, refusing references that leave the data set: relative
 * and absolute paths outside the root, {@code file://} URIs outside it and {@code s3://} URIs of other buckets (unless
 * allowed, {@link SourceConfig#refsOutsideRoot()}).
 */
final class References {
    private References() { }

    /** What a reference names. */
    sealed interface Target permits FileTarget, S3Target {}

    /** A local file; {@code confined} when it came from a relative reference and must stay inside the root, symlinks included. */
    record FileTarget(Path path, boolean confined) implements Target {
        @Override
        public String toString() { return path.toString(); }
    }

    record S3Target(String bucket, String key) implements Target {
        @Override
        public String toString() { return "s3://" + bucket + "/" + key; }
    }

    /**
     * Resolves a manifest's {@code reference} against {@code root}, confined (a {@code file://} URI inside the root, an
     * {@code s3://} URI in the root's bucket): {@code resolve(sampleId, reference, root, false)}.
     */
    static Target resolve(String sampleId, String reference, DatasetLocation root) {
        return resolve(sampleId, reference, root, false);
    }

    /**
     * Resolves {@code reference} against {@code root}; throws SampleException(FETCH) when malformed or escaping.
     * Relative and plain absolute paths must stay inside the root whatever {@code urisAnywhere} says. A {@code file://}
     * URI must name a file inside a local root (and its real path stay inside it, checked when read) and an
     * {@code s3://} URI an object of an S3 root's bucket with no {@code .} or {@code ..} segment (a server that
     * normalises paths could take {@code s3://b/../other/k} to another bucket), unless {@code urisAnywhere}: then both
     * are taken as given (for the data URIs of the command line, and for manifests trusted like it).
     */
    static Target resolve(String sampleId, String reference, DatasetLocation root, boolean urisAnywhere) {
        if (reference == null || reference.isBlank()) throw refuse(sampleId, "empty image reference");
        try {
            if (reference.startsWith("s3://")) {
                S3Target target = parseS3Target(reference);
                return urisAnywhere ? target : confineS3(sampleId, reference, target, root);
            }
            if (reference.startsWith("file:")) {
                Path path = fileUriToPath(reference);
                return urisAnywhere ? new FileTarget(path, false) : confineFile(sampleId, reference, path, root);
            }
        } catch (IllegalArgumentException e) {
            throw new SampleException(sampleId, SampleException.Stage.FETCH, e.getMessage(), e);
        }
        if (reference.matches("^[A-Za-z][A-Za-z0-9+.-]+://.*"))
            throw refuse(sampleId, "unsupported scheme in '" + reference + "' (use a relative path, file:// or s3://)");
        return switch (root) {
            case DatasetLocation.Local local -> resolveLocal(sampleId, reference, local.rootDir());
            case DatasetLocation.S3 s3 -> resolveS3(sampleId, reference, s3);
        };
    }

    /** What the refusal of a reference outside the root tells the user to do. */
    static final String ALLOW_HINT = "(a manifest's file:// and s3:// references must stay in its data set; --allow-refs-outside-root lifts that)";

    private static FileTarget confineFile(String sampleId, String reference, Path path, DatasetLocation root) {
        if (!(root instanceof DatasetLocation.Local local))
            throw refuse(sampleId, "file URI '" + reference + "' in a data set on S3 (" + root.root() + ") " + ALLOW_HINT);
        Path dir = local.rootDir();
        if (!path.startsWith(dir) || path.equals(dir))
            throw refuse(sampleId, "file URI '" + reference + "' escapes the data set root " + dir + " " + ALLOW_HINT);
        return new FileTarget(path, true);
    }

    private static S3Target confineS3(String sampleId, String reference, S3Target target, DatasetLocation root) {
        if (!(root instanceof DatasetLocation.S3 s3))
            throw refuse(sampleId, "s3 URI '" + reference + "' in a local data set (" + root.root() + ") " + ALLOW_HINT);
        if (!target.bucket().equals(s3.bucket()))
            throw refuse(sampleId, "s3 URI '" + reference + "' leaves the data set's bucket " + s3.bucket() + " " + ALLOW_HINT);
        for (String segment : target.key().split("/", -1))
            if (segment.equals("..") || segment.equals("."))
                throw refuse(sampleId, "s3 URI '" + reference + "' has a '" + segment + "' segment " + ALLOW_HINT);
        return target;
    }

    private static FileTarget resolveLocal(String sampleId, String reference, Path root) {
        Path p;
        try {
            p = Path.of(reference);
        } catch (InvalidPathException e) {
            throw refuse(sampleId, "invalid image path '" + reference + "': " + e.getReason());
        }
        Path resolved = (p.isAbsolute() ? p : root.resolve(p)).normalize();
        if (!resolved.startsWith(root) || resolved.equals(root))
            throw refuse(sampleId, "image path '" + reference + "' escapes the data set root " + root);
        return new FileTarget(resolved, true);
    }

    private static S3Target resolveS3(String sampleId, String reference, DatasetLocation.S3 root) {
        if (reference.startsWith("/"))
            throw refuse(sampleId, "absolute path '" + reference + "' in an s3 data set; use a relative path or an s3:// URI");
        List<String> segments = new ArrayList<>();
        for (String segment : reference.split("/")) {
            if (segment.isEmpty() || segment.equals(".")) continue;
            if (segment.equals("..")) {
                if (segments.isEmpty())
                    throw refuse(sampleId, "image path '" + reference + "' escapes the data set root " + root.root());
                segments.removeLast();
            } else {
                segments.add(segment);
            }
        }
        if (segments.isEmpty() || reference.endsWith("/"))
            throw refuse(sampleId, "image path '" + reference + "' names a folder, not an object");
        return new S3Target(root.bucket(), root.rootPrefix() + String.join("/", segments));
    }

    /** {@code s3://bucket/key} taken literally (S3 URIs are not percent-encoded). */
    static DatasetLocation.S3 parseS3(String uri) {
        String rest = uri.substring("s3://".length());
        int slash = rest.indexOf('/');
        if (slash <= 0 || slash == rest.length() - 1) throw new IllegalArgumentException("expected s3://bucket/key: " + uri);
        return new DatasetLocation.S3(rest.substring(0, slash), rest.substring(slash + 1));
    }

    /** The S3 target named by an {@code s3://} reference. */
    private static S3Target parseS3Target(String uri) {
        var loc = parseS3(uri);
        return new S3Target(loc.bucket(), loc.key());
    }

    /** {@code file:///p} or {@code file:/p}, percent-decoded when the URI is well formed; a host is refused. */
    static Path fileUriToPath(String uri) {
        String rest;
        if (uri.startsWith("file://")) {
            rest = uri.substring("file://".length());
            if (rest.startsWith("localhost/")) rest = rest.substring("localhost".length());
            if (!rest.startsWith("/")) throw new IllegalArgumentException("file URI with a host or a relative path: " + uri);
        } else {
            rest = uri.substring("file:".length());
            if (!rest.startsWith("/")) throw new IllegalArgumentException("file URI must be absolute: " + uri);
        }
        try {
            String decoded = new URI("file://" + rest).getPath();
            return Path.of(decoded == null ? rest : decoded).normalize();
        } catch (URISyntaxException e) {
            try {
                return Path.of(rest).normalize();
            } catch (InvalidPathException ipe) {
                throw new IllegalArgumentException("invalid file URI '" + uri + "': " + ipe.getReason(), ipe);
            }
        } catch (InvalidPathException e) {
            throw new IllegalArgumentException("invalid file URI '" + uri + "': " + e.getReason(), e);
        }
    }

    private static SampleException refuse(String sampleId, String message) {
        return new SampleException(sampleId, SampleException.Stage.FETCH, message);
    }
}
