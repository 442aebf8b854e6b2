package dev.stoker.bench.index;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.io.AtomicFiles;
import dev.stoker.source.ManifestRecords;
import dev.stoker.source.ObjectSources;
import dev.stoker.source.RecordIndex;
import dev.stoker.source.SourceConfig;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code stoker bench index}: what indexing a manifest costs, at several sizes. For each size it writes (once; kept
 * in the work folder) a JSON Lines manifest of that many LLaVA records, reads it once so that it is in the page
 * cache, then measures: a pass that indexes it (MB/s, samples/s), the heap the index keeps per sample (used heap
 * after a full GC, with the index and without), saving the index and loading it back (the cached start), and, for
 * the same records as a JSON array, the indexing pass again. The last stdout line is JSON
 * {@code {"index": {N: {"mb_per_s", "samples_per_s", "heap_bytes_per_sample", "cached_load_s", "first_index_s", …}}}}.
 *
 * <p>One run per size in this JVM, sizes in the order given; the heap figure is a difference of two GC'd heaps, so it
 * carries their noise (a few MB: at 0.3 M samples a few bytes per sample).
 */
public final class IndexBench {
    public record Settings(List<Integer> samples, Path workDir, boolean json) {}

    private IndexBench() {}

    public static Map<String, Object> run(Settings s, PrintWriter out) throws Exception {
        Path dir = s.workDir() != null ? Files.createDirectories(s.workDir()) : Files.createTempDirectory("stoker-bench-index");
        var results = new LinkedHashMap<String, Object>();
        out.printf(Locale.ROOT, "%10s %10s %9s %12s %10s %10s %10s%n", "samples", "MB", "MB/s", "samples/s", "heap B/s", "index s", "cached s");
        for (int n : s.samples()) {
            Path jsonl = manifest(dir, n, false);
            warm(jsonl);
            var r = new LinkedHashMap<String, Object>();
            long before = usedAfterGc();
            long t0 = System.nanoTime();
            RecordIndex index;
            try (var in = Files.newInputStream(jsonl)) {
                index = RecordIndex.scan(jsonl.getFileName().toString(), in);
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            long after = usedAfterGc();
            if (index.size() != n) throw new IllegalStateException("indexed " + index.size() + " of " + n + " records");
            double mb = Files.size(jsonl) / 1e6;
            r.put("manifest_mb", round(mb));
            r.put("first_index_s", round(secs));
            r.put("mb_per_s", round(mb / secs));
            r.put("samples_per_s", Math.round(n / secs));
            r.put("heap_bytes_per_sample", round((after - before) / (double) n));
            r.put("index_bytes_per_sample", index.bytesPerRecord());
            // the cached start: what serve does the second time (the product's path: stat, load, check)
            var cache = new ManifestRecords.IndexCache(dir.resolve("cache"), 0);
            try (var source = ObjectSources.open(jsonl.toString(), SourceConfig.defaults())) {
                ManifestRecords.open(source, jsonl.getFileName().toString(), cache); // indexes and saves (or loads)
                long c0 = System.nanoTime();
                var cached = ManifestRecords.open(source, jsonl.getFileName().toString(), cache);
                r.put("cached_load_s", round((System.nanoTime() - c0) / 1e9));
                if (!cached.fromCache() || cached.size() != n) throw new IllegalStateException("the index was not loaded from the cache");
            }
            index = null;
            if (s.json()) {
                Path array = manifest(dir, n, true);
                warm(array);
                long a0 = System.nanoTime();
                try (var in = Files.newInputStream(array)) {
                    var ai = RecordIndex.scan(array.getFileName().toString(), in);
                    if (ai.size() != n) throw new IllegalStateException("indexed " + ai.size() + " of " + n + " array elements");
                }
                double as = (System.nanoTime() - a0) / 1e9;
                r.put("json_array_mb_per_s", round(Files.size(array) / 1e6 / as));
            }
            out.printf(Locale.ROOT, "%10d %10.1f %9.1f %12d %10.1f %10.2f %10.2f%n", n, mb, (double) r.get("mb_per_s"), (long) r.get("samples_per_s"),
                    (double) r.get("heap_bytes_per_sample"), secs, (double) r.get("cached_load_s"));
            out.flush();
            results.put(Integer.toString(n), r);
        }
        var json = Map.<String, Object>of("index", results);
        out.println(new ObjectMapper().writeValueAsString(json));
        out.flush();
        return json;
    }

    /** The manifest of {@code n} records in {@code dir}, written once (kept for later runs). */
    static Path manifest(Path dir, int n, boolean array) throws IOException {
        Path file = dir.resolve("train-" + n + (array ? ".json" : ".jsonl"));
        if (Files.isRegularFile(file) && Files.size(file) > 0) return file;
        return AtomicFiles.write(file, tmp -> {
            try (BufferedWriter w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
                if (array) w.write("[\n");
                for (int i = 0; i < n; i++) {
                    if (array) w.write(i == 0 ? "  " : ",\n  ");
                    w.write("{\"id\": \"s" + i + "\", \"image\": \"images/" + (i % 1000) + ".jpg\", \"conversations\": "
                            + "[{\"from\": \"human\", \"value\": \"<image>\\nWhat is shown in this picture? Answer briefly.\"}, "
                            + "{\"from\": \"gpt\", \"value\": \"A photo, number " + i + ", of something worth describing.\"}]}");
                    if (!array) w.write('\n');
                }
                if (array) w.write("\n]\n");
            }
        });
    }

    /** Reads the file once, so that the timed pass reads from the page cache (the "warm" start of the targets). */
    private static void warm(Path file) throws IOException {
        try (var in = Files.newInputStream(file)) {
            in.transferTo(java.io.OutputStream.nullOutputStream());
        }
    }

    private static long usedAfterGc() {
        var mem = ManagementFactory.getMemoryMXBean();
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 3; i++) {
            System.gc();
            used = Math.min(used, mem.getHeapMemoryUsage().getUsed());
        }
        return used;
    }

    private static double round(double v) { return Math.round(v * 100) / 100.0; }
}
