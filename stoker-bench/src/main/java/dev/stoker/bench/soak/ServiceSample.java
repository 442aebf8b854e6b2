package dev.stoker.bench.soak;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * One sample of the soaked service, a row of {@code soak.csv} ({@link #COLUMNS}): its memory from
 * {@code /proc/PID/status}, its store's arena on disk, and its counters scraped from the metrics
 * endpoint; -1 where a figure could not be read.
 */
public record ServiceSample(double tSeconds, long rss, long rssAnon, long rssShmem, long shm, long storeInUse, long storeMapped, long leases,
                            long delivered, long skipped, long batches) {
    public static final List<String> COLUMNS = List.of("t_s", "rss_bytes", "rss_anon_bytes", "rss_shmem_bytes", "shm_bytes",
            "store_in_use_bytes", "store_mapped_bytes", "store_leases", "delivered_samples", "skipped_samples", "delivered_batches");

    /** The columns after {@code t_s}. */
    public long[] values() { return new long[] {rss, rssAnon, rssShmem, shm, storeInUse, storeMapped, leases, delivered, skipped, batches}; }

    /** One sample: /proc of the service, its arena's files, one scrape of its metrics. */
    public static ServiceSample take(long pid, Path arena, HttpClient http, URI metrics, double tSeconds) throws InterruptedException {
        Map<String, Long> status = procStatus(pid);
        Map<String, Double> scraped = scrape(http, metrics);
        return new ServiceSample(tSeconds, status.getOrDefault("VmRSS", -1L), status.getOrDefault("RssAnon", -1L),
                status.getOrDefault("RssShmem", -1L), directoryBytes(arena),
                metric(scraped, "stoker_store_bytes_in_use"), metric(scraped, "stoker_store_bytes_mapped"),
                metric(scraped, "stoker_store_leases"), metric(scraped, "stoker_samples_delivered_total"),
                metric(scraped, "stoker_samples_skipped_total"), metric(scraped, "stoker_batches_delivered_total"));
    }

    /** The memory lines of {@code /proc/PID/status} ({@code VmRSS:   123 kB}), in bytes. */
    static Map<String, Long> procStatus(long pid) {
        var m = new LinkedHashMap<String, Long>();
        try {
            for (String line : Files.readAllLines(Path.of("/proc", Long.toString(pid), "status"))) {
                String[] parts = line.split("\\s+");
                if (parts.length == 3 && parts[0].endsWith(":") && parts[2].equals("kB"))
                    m.put(parts[0].substring(0, parts[0].length() - 1), Long.parseLong(parts[1]) * 1024);
            }
        } catch (IOException | NumberFormatException e) {
            // the process is gone: no figures
        }
        return m;
    }

    /** Bytes of the regular files under {@code dir} (segment files on a tmpfs are fully allocated); 0 when it is gone. */
    static long directoryBytes(Path dir) {
        long total = 0;
        try (Stream<Path> files = Files.list(dir)) {
            for (Path p : files.toList()) {
                try {
                    if (Files.isRegularFile(p)) total += Files.size(p);
                } catch (NoSuchFileException e) {
                    // deleted while listed
                }
            }
        } catch (IOException e) {
            return 0;
        }
        return total;
    }

    /** The samples of a Prometheus text page, by name with labels ({@code name{a="b"}}); empty when the scrape fails. */
    static Map<String, Double> scrape(HttpClient http, URI uri) throws InterruptedException {
        var m = new LinkedHashMap<String, Double>();
        try {
            var response = http.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
            if (response.statusCode() != 200) return m;
            for (String line : response.body().split("\n")) {
                if (line.isBlank() || line.startsWith("#")) continue;
                int space = line.lastIndexOf(' ');
                if (space > 0) m.put(line.substring(0, space), Double.parseDouble(line.substring(space + 1)));
            }
        } catch (IOException | NumberFormatException e) {
            // the service is busy or stopping: this sample lacks its counters
        }
        return m;
    }

    private static long metric(Map<String, Double> scraped, String name) {
        Double v = scraped.get(name);
        return v == null ? -1 : Math.round(v);
    }
}
