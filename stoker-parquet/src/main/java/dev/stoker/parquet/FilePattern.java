package dev.stoker.parquet;

import dev.stoker.source.DatasetLocation;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The files a Parquet source names: the last segment of its location is one file name, or a pattern of them.
 * Braces expand first, {@code {0000..0009}} to ten zero-padded numbers and {@code {a,b}} to each word (several
 * braces: every combination, in order); then, for local files only, {@code *}, {@code ?} and {@code [...]} match
 * the names in the folder (sorted; on S3 the objects ListObjectsV2 lists directly under the folder's prefix).
 */
final class FilePattern {
    private static final Pattern RANGE = Pattern.compile("(\\d+)\\.\\.(\\d+)");
    /** Brace expansion's limit (a typo like {0..999999999} must not fill the heap). */
    static final int MAX_FILES = 100_000;

    private FilePattern() { }

    /** The last segment of {@code location} ({@code train-*.parquet}). */
    static String name(DatasetLocation location) {
        return switch (location) {
            case DatasetLocation.Local l -> l.manifest().getFileName().toString();
            case DatasetLocation.S3 s -> s.key().substring(s.key().lastIndexOf('/') + 1);
        };
    }

    /** The file names (relative to the location's folder) the pattern names, in order; none is an IOException. */
    static List<String> files(DatasetLocation location) throws IOException { return files(location, null); }

    /** {@link #files(DatasetLocation)}, a glob on S3 matched against {@code source}'s listing of the folder. */
    static List<String> files(DatasetLocation location, dev.stoker.source.ObjectSource source) throws IOException {
        String pattern = name(location);
        List<String> expanded;
        try {
            expanded = expand(pattern);
        } catch (IllegalArgumentException e) {
            throw new IOException("bad pattern '" + pattern + "': " + e.getMessage(), e);
        }
        var out = new ArrayList<String>();
        for (String name : expanded) {
            if (!isGlob(name)) {
                out.add(name);
                continue;
            }
            var matcher = FileSystems.getDefault().getPathMatcher("glob:" + name);
            var found = new ArrayList<String>();
            if (location instanceof DatasetLocation.Local local) {
                try (DirectoryStream<java.nio.file.Path> dir = Files.newDirectoryStream(local.rootDir())) {
                    for (var p : dir) if (matcher.matches(p.getFileName()) && Files.isRegularFile(p)) found.add(p.getFileName().toString());
                }
            } else {
                if (source == null)
                    throw new IOException("'" + pattern + "': a glob on S3 needs a listing; name the files with a brace range, e.g. train-{00000..00009}.parquet");
                int glob = firstGlob(name);
                for (String ref : source.list(name.substring(0, glob))) // objects directly under the folder, relative to it
                    if (ref.indexOf('/') < 0 && matcher.matches(java.nio.file.Path.of(ref))) found.add(ref);
            }
            found.sort(null);
            out.addAll(found);
        }
        if (out.isEmpty()) throw new IOException("no file matches " + location.manifestUri());
        if (out.stream().distinct().count() != out.size()) throw new IOException("'" + pattern + "' names a file more than once");
        return out;
    }

    private static int firstGlob(String s) {
        int i = s.length();
        for (char c : new char[] {'*', '?', '['}) if (s.indexOf(c) >= 0) i = Math.min(i, s.indexOf(c));
        return i;
    }

    static boolean isGlob(String s) { return s.indexOf('*') >= 0 || s.indexOf('?') >= 0 || s.indexOf('[') >= 0; }

    /** Brace expansion: {@code a{1..3}b} is a1b, a2b, a3b; {@code {x,y}} is x, y. */
    static List<String> expand(String s) {
        int open = s.indexOf('{');
        if (open < 0) {
            if (s.indexOf('}') >= 0) throw new IllegalArgumentException("'}' without '{'");
            return List.of(s);
        }
        int close = s.indexOf('}', open);
        if (close < 0) throw new IllegalArgumentException("'{' without '}'");
        String body = s.substring(open + 1, close);
        if (body.indexOf('{') >= 0) throw new IllegalArgumentException("nested braces");
        var words = new ArrayList<String>();
        var range = RANGE.matcher(body);
        if (range.matches()) {
            String a = range.group(1), b = range.group(2);
            long from = Long.parseLong(a), to = Long.parseLong(b);
            if (to < from) throw new IllegalArgumentException("range {" + body + "} runs backwards");
            if (to - from >= MAX_FILES) throw new IllegalArgumentException("range {" + body + "} names over " + MAX_FILES + " files");
            int width = a.length() == b.length() || a.startsWith("0") ? a.length() : 0;
            for (long v = from; v <= to; v++) words.add(width > 0 ? String.format("%0" + width + "d", v) : Long.toString(v));
        } else if (body.contains(",")) {
            for (String w : body.split(",", -1)) words.add(w);
        } else {
            throw new IllegalArgumentException("{" + body + "} is neither a range {a..b} nor a list {x,y}");
        }
        var out = new ArrayList<String>();
        for (String w : words) {
            for (String rest : expand(s.substring(close + 1))) {
                out.add(s.substring(0, open) + w + rest);
                if (out.size() > MAX_FILES) throw new IllegalArgumentException("names over " + MAX_FILES + " files");
            }
        }
        return out;
    }
}
