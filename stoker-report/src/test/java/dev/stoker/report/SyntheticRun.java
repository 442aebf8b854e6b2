package dev.stoker.report;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Random;

/** Writes a synthetic ladder run directory in the format of docs/run-data.md. */
final class SyntheticRun {
    static final String[] MODES = {"zero-copy", "serial", "prefetch", "concurrent"}; // deliberately out of ladder order

    private SyntheticRun() {}

    /**
     * A run of all four modes, 2 ranks, {@code steps} steps each. With {@code extras}, the pipeline
     * files also carry skipped samples by cause, {@code stages}, {@code timeline} and {@code verdict}; the zero-copy verdict's
     * evidence holds {@code evidence} verbatim (for escaping tests).
     */
    static void write(Path dir, int steps, boolean extras, String evidence) throws IOException {
        Files.createDirectories(dir);
        var rnd = new Random(42);
        for (int m = 0; m < MODES.length; m++) {
            String mode = MODES[m];
            double meanWaitMs = switch (mode) {
                case "serial" -> 400;
                case "concurrent" -> 200;
                case "prefetch" -> 60;
                default -> 10;
            };
            for (int r = 0; r < 2; r++) {
                var sb = new StringBuilder("[");
                double elapsed = 0;
                for (int i = 0; i < steps; i++) {
                    long wait = (long) ((i == 0 ? 1200 : meanWaitMs * (0.3 + 1.4 * rnd.nextDouble())) * 1e6);
                    long compute = 250_000_000L;
                    elapsed += (wait + compute) / 1e6;
                    if (i > 0) sb.append(',');
                    sb.append('[').append(wait).append(',').append(compute).append(",8000000,8,").append(wait / 4).append(']');
                }
                sb.append(']');
                boolean shm = mode.equals("zero-copy");
                Files.writeString(dir.resolve(mode + "-rank" + r + ".json"), String.format(Locale.ROOT,
                        "{\"rank\":%d,\"world\":2,\"connect_wait_ms\":12.5,\"elapsed_ms\":%.3f,\"bytes_received\":%d,"
                                + "\"refs_received\":%d,\"shared_memory\":%b,\"steps\":%s}",
                        r, elapsed, shm ? 0 : 8_000_000L * steps, shm ? steps : 0, shm, sb));
            }
            var p = new StringBuilder("{\"pipeline\":{\"fetchedSamples\":100,\"fetchNanos\":3000000000,\"encodedSamples\":100,"
                    + "\"encodeNanos\":2500000000,\"assembledBatches\":12,\"assembleNanos\":120000000,\"copiedBytes\":96000000,"
                    + "\"ranks\":[{\"rank\":0,\"producerWaits\":3,\"consumerWaits\":1},{\"rank\":1,\"producerWaits\":2,\"consumerWaits\":0}]}");
            if (extras) {
                p.setLength(p.length() - 1); // the counters' object goes on: skipped samples by cause
                p.append(",\"skippedSamples\":3,\"errorSamples\":2,\"filteredSamples\":1,\"skippedByCause\":[{\"kind\":\"error\",")
                        .append("\"stage\":\"fetch\",\"reason\":\"file not found\",\"count\":2,\"example\":\"s4\"},{\"kind\":\"filtered\",")
                        .append("\"stage\":\"tokenize\",\"reason\":\"over --max-seq-len\",\"count\":1,\"example\":\"s8\"}]}");
                p.append(",\"stages\":{\"fetch\":{\"count\":100,\"mean_ms\":31,\"p50_ms\":30,\"p90_ms\":41,\"p99_ms\":60,\"max_ms\":75},")
                        .append("\"encode\":{\"count\":100,\"mean_ms\":24,\"p50_ms\":23,\"p90_ms\":30,\"p99_ms\":38,\"max_ms\":40},")
                        .append("\"deliver\":{\"count\":12,\"mean_ms\":0.4,\"p50_ms\":0.05,\"p90_ms\":1.2,\"p99_ms\":9,\"max_ms\":9.5}}");
                p.append(",\"timeline\":{\"interval_ms\":100,\"ranks\":2,\"cpu_threads\":2,\"fetch_limit\":64,\"prefetch_batches\":4,")
                        .append("\"columns\":[\"t_ms\",\"fetched\",\"encoded\",\"delivered\",\"fetch_in_flight\",\"cpu_busy\",\"cpu_queued\",")
                        .append("\"store_bytes\",\"buffered_batches\",\"buffered_bytes\",\"buffer_full\"],\"rows\":[");
                for (int t = 1; t <= 200; t++) {
                    if (t > 1) p.append(',');
                    int b0 = (t / 7) % 5, b1 = (t / 5) % 5;
                    p.append(String.format(Locale.ROOT, "[%d,%d,%d,%d,%d,%d,%d,0,[%d,%d],[%d,%d],[%d,%d]]", t * 100, t * 2, t * 2 - 1, t,
                            (t * 13) % 64, t % 3, (t * 7) % 11, b0, b1, b0 * 8_000_000, b1 * 8_000_000, b0 == 4 ? 1 : 0, b1 == 4 ? 1 : 0));
                }
                p.append("]}");
                if (mode.equals("zero-copy") || mode.equals("prefetch")) packing(p, mode.equals("zero-copy") ? 4 : 12, 150, rnd);
                String ev = mode.equals("zero-copy") ? evidence : "decode pool busy 98% on 2 threads";
                p.append(",\"verdict\":{\"kind\":\"CPU_BOUND\",\"stage\":\"encode\",\"evidence\":\"").append(json(ev))
                        .append("\",\"advice\":\"give the CPU stage more cores (--threads)\",\"cpu_busy_fraction\":0.98}");
            }
            p.append('}');
            Files.writeString(dir.resolve(mode + "-pipeline.json"), p);
        }
    }

    /**
     * Appends a packed job's {@code pipeline.pack} (docs/run-data.md) to the pipeline object being written (its counters'
     * object already closed): {@code steps} steps of {@code ranks} ranks, costs around 40 TFLOP, N = 16384.
     */
    static void packing(StringBuilder p, int ranks, int steps, Random rnd) {
        int at = p.indexOf("\"pipeline\":{") + "\"pipeline\":{".length();
        var step = new StringBuilder(); var imb = new StringBuilder(); var pad = new StringBuilder(); var tok = new StringBuilder();
        var smp = new StringBuilder(); var costs = new StringBuilder();
        double sumImb = 0, sumPad = 0;
        for (int i = 0; i < steps; i++) {
            String sep = i == 0 ? "" : ",";
            double max = 0, sum = 0;
            costs.append(sep).append('[');
            for (int r = 0; r < ranks; r++) {
                double c = 4e13 * (1 + (i < steps / 2 ? 0.15 : 0.01) * rnd.nextGaussian());
                costs.append(r == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.6e", c));
                max = Math.max(max, c);
                sum += c;
            }
            costs.append(']');
            double im = max * ranks / sum, pd = 0.01 + 0.04 * rnd.nextDouble();
            long tokens = Math.round((1 - pd) * ranks * 16384);
            sumImb += im;
            sumPad += pd;
            step.append(sep).append(1000 + i);
            imb.append(sep).append(String.format(Locale.ROOT, "%.6f", im));
            pad.append(sep).append(String.format(Locale.ROOT, "%.6f", pd));
            tok.append(sep).append(tokens);
            smp.append(sep).append(19 * ranks);
        }
        String pack = String.format(Locale.ROOT, "\"pack\":{\"ranks\":%d,\"packTokens\":16384,\"balance\":\"cost\",\"steps\":%d,\"samples\":%d,"
                        + "\"tokens\":0,\"filtered\":0,\"skipped\":0,\"meanImbalance\":%.6f,\"meanPaddingFraction\":%.6f,\"meanImbalanceLoss\":0,"
                        + "\"recentSteps\":%d,\"recentImbalance\":%.6f,\"recentPaddingFraction\":%.6f,\"recentImbalanceLoss\":0,\"lastStep\":%d,"
                        + "\"lastCosts\":[],\"series\":{\"step\":[%s],\"imbalance\":[%s],\"paddingFraction\":[%s],\"tokens\":[%s],"
                        + "\"samples\":[%s],\"costs\":[%s]}},",
                ranks, steps, 19L * ranks * steps, sumImb / steps, sumPad / steps, steps, sumImb / steps, sumPad / steps, 999 + steps,
                step, imb, pad, tok, smp, costs);
        p.insert(at, pack);
    }

    private static String json(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"");
    }
}
