package dev.stoker.report;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(60)
class RunReportTest {
    private static final String EVIL = "<script>alert('x')</script> & \"quoted\"";

    @Test
    void fullRunHasEveryPlotVerdictAndNoExternalUrl(@TempDir Path dir) throws Exception {
        SyntheticRun.write(dir, 40, true, EVIL);
        Path html = RunReport.write(dir);
        assertEquals(dir.resolve("report.html"), html);
        String s = Files.readString(html);
        for (String plot : RunReport.PLOTS) {
            assertTrue(s.contains("data-plot=\"" + plot + "\""), plot);
        }
        // two of the modes were packed: the packing plot, one block per packed mode, 12 ranks as their spread
        assertEquals(List.of("wait-ratio", "timeline", "latency", "queue-depth", "packing"), RunReport.plots(RunData.load(dir)));
        String packing = s.substring(s.indexOf("data-plot=\"packing\""));
        packing = packing.substring(0, packing.indexOf("</svg>"));
        assertTrue(packing.contains(">prefetch<") && packing.contains(">zero-copy<") && !packing.contains(">serial<"), packing);
        assertTrue(packing.contains("150 packed steps (run), 4 ranks, --pack-tokens 16384, --balance cost"), packing);
        assertTrue(packing.contains("zero-copy rank 3: mean") && !packing.contains("prefetch rank 0"), "a line per rank up to 8 ranks");
        assertTrue(packing.contains("prefetch max: mean") && packing.contains("prefetch min: mean"), "the spread beyond");
        assertTrue(packing.contains("zero-copy imbalance: mean") && packing.contains("zero-copy padding: mean"), packing);
        assertTrue(packing.contains("TFLOP") && packing.contains("step 1,000"), packing);
        assertFalse(s.contains("data-empty"), "every plot has data in a full run");
        assertFalse(s.contains("not recorded in this run"));
        assertFalse(s.contains("http://") || s.contains("https://"), "no URL at all");
        assertFalse(Pattern.compile("(src|href)\\s*=", Pattern.CASE_INSENSITIVE).matcher(s).find(), "nothing loaded from anywhere");
        // verdict present, escaped
        assertTrue(s.contains("CPU-bound"));
        assertTrue(s.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;"));
        assertFalse(s.contains(EVIL));
        assertEquals(2, count(s, "<script>"), "only the report's own two scripts");
        // per-stage latencies used, stages in pipeline order
        assertTrue(s.contains("Per-stage latency distributions"));
        String latency = s.substring(s.indexOf("data-plot=\"latency\""), s.indexOf("data-plot=\"queue-depth\""));
        assertTrue(latency.indexOf(">fetch<") > 0 && latency.indexOf(">fetch<") < latency.indexOf(">encode<")
                && latency.indexOf(">encode<") < latency.indexOf(">deliver<"));
        assertTrue(s.contains("buffered_batches[1]"));
        // modes in ladder order
        List<Integer> at = java.util.stream.Stream.of(">serial<", ">concurrent<", ">prefetch<", ">zero-copy<").map(s::indexOf).toList();
        assertTrue(at.get(0) > 0 && at.get(0) < at.get(1) && at.get(1) < at.get(2) && at.get(2) < at.get(3), at.toString());
    }

    @Test
    void missingExtrasSayNotRecordedAndFallBackToWaitHistogram(@TempDir Path dir) throws Exception {
        SyntheticRun.write(dir, 10, false, "");
        String s = Files.readString(RunReport.write(dir));
        for (String plot : RunReport.PLOTS) assertTrue(s.contains("data-plot=\"" + plot + "\""), plot);
        assertTrue(s.contains("Queue depth over time (pipeline timeline): not recorded in this run"));
        assertTrue(s.contains("No bottleneck verdict recorded in this run."));
        assertTrue(s.contains("Distribution of the trainers&#39; per-step waits"));
        assertFalse(s.contains("data-plot=\"packing\""), "no packing recorded: no packing plot");
        assertEquals(RunReport.PLOTS, RunReport.plots(RunData.load(dir)));
    }

    /**
     * A cluster job's coordinator's run directory (serve --join --report-dir: its pipeline file only) shows every node's
     * and rank's wait ratio, remote ranks included, the data-bound verdict with its label, and a refused report; node names
     * are escaped like any other text.
     */
    @Test
    void aClusterCoordinatorsRunShowsTheWaitPerNodeAndRank(@TempDir Path dir) throws Exception {
        String a = "pekko://stoker@127.0.0.1:2551", b = EVIL.replace("\"", "\\\"");
        Files.writeString(dir.resolve("job-pipeline.json"), ("{\"verdict\":{\"kind\":\"DATA_BOUND\",\"stage\":\"data\","
                + "\"evidence\":\"trainer wait ratio 0.124\",\"advice\":\"look first at the nodes whose ranks wait most\"},"
                + "\"trainers\":{\"world\":3,\"ranks\":["
                + "{\"rank\":0,\"nodes\":[\"A\"],\"steps_reported\":10,\"wait_ratio\":0.01,\"steady_wait_ratio\":0.00625},"
                + "{\"rank\":2,\"nodes\":[\"B\"],\"steps_reported\":10,\"wait_ratio\":0.3333,\"steady_wait_ratio\":0.3333}],"
                + "\"nodes\":[{\"node\":\"A\",\"ranks\":[0],\"steps_reported\":10,\"wait_ratio\":0.01,\"steady_wait_ratio\":0.00625},"
                + "{\"node\":\"B\",\"ranks\":[2],\"steps_reported\":10,\"wait_ratio\":0.3333,\"steady_wait_ratio\":0.3333}],"
                + "\"steps_reported\":20,\"wait_ratio\":0.17,\"steady_wait_ratio\":0.124,\"refused_reports\":1,"
                + "\"refusals\":{\"A\":\"rank 1 reported, whose batches node A never asked for\"}}}").replace("\"A\"", "\"" + a + "\"")
                .replace("\"B\"", "\"" + b + "\""));
        String s = Files.readString(RunReport.write(dir));
        assertTrue(s.contains("verdict kind-data_bound") && s.contains("<b>Data-bound</b> — limiting stage: <b>data</b>"), s);
        String table = s.substring(s.indexOf("<table id=\"cluster-wait\">"));
        table = table.substring(0, table.indexOf("</table>"));
        assertTrue(table.contains("<td>" + a + "</td><td>0</td><td>10</td><td>0.010</td><td>0.006</td>"), table);
        assertTrue(table.contains("<td>rank 2 (on &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;)</td><td>2</td>"
                + "<td>10</td><td>0.333</td><td>0.333</td>"), table);
        assertTrue(table.contains("<td>all</td><td>3 in the world</td><td>20</td><td>0.170</td><td>0.124</td>"), table);
        assertTrue(table.contains("1 node reports refused"), table);
        assertFalse(s.contains(EVIL));
    }

    /** bench cluster --ablate's work dir: its table, each layout's gain and the talk's figures, with no trainer reports beside them. */
    @Test
    void anAblationsWorkDirShowsItsTable(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve(RunData.ABLATION_FILE), "{\"ablation\":["
                + "{\"scale\":\"large\",\"placement\":\"pack\",\"retrieval\":\"relay\",\"ranks\":8,\"batch\":8,\"workers\":8,\"ok\":true,"
                + "\"samples_per_s\":20.0,\"steady_samples_per_s\":21.5,\"wait_ratio\":0.5,\"steady_wait_ratio\":0.45,\"busiest_tx_utilisation\":0.97},"
                + "{\"scale\":\"large\",\"placement\":\"spread\",\"retrieval\":\"direct\",\"ranks\":8,\"batch\":8,\"workers\":8,\"ok\":false,"
                + "\"samples_per_s\":30.0,\"steady_samples_per_s\":null,\"wait_ratio\":0.1,\"steady_wait_ratio\":0.08,\"busiest_tx_utilisation\":null}],"
                + "\"gain\":{\"large\":{\"pack+relay\":1.0,\"spread+direct\":1.5}},\"scale\":4,"
                + "\"talk\":{\"small\":\"neither knob helped\",\"large\":\"" + EVIL.replace("\"", "\\\"") + "\"}}");
        String s = Files.readString(RunReport.write(dir));
        String table = s.substring(s.indexOf("<table id=\"ablation\">"));
        table = table.substring(0, table.indexOf("</table>"));
        assertTrue(table.contains("<td>large</td><td>pack</td><td>relay</td><td>8</td><td>8</td><td>8</td><td>20.00</td><td>21.50</td>"
                + "<td>0.500</td><td>0.450</td><td>97%</td><td>1.000</td>"), table);
        assertTrue(table.contains("<td>spread</td><td>direct</td>") && table.contains("<td>–</td><td>1.500 (run failed)</td>"), table);
        assertTrue(s.contains("at 4× its ranks, workers and batch") && s.contains("neither knob helped"), s);
        assertFalse(s.contains(EVIL));
    }

    /** The straggler-bound verdict of a packed job is shown with its label. */
    @Test
    void aStragglerBoundVerdictIsLabelled(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("job-pipeline.json"), "{\"verdict\":{\"kind\":\"STRAGGLER_BOUND\",\"stage\":\"balance\","
                + "\"evidence\":\"predicted step cost imbalance 1.136\",\"advice\":\"--balance cost\"}}");
        String s = Files.readString(RunReport.write(dir));
        assertTrue(s.contains("verdict kind-straggler_bound"), s);
        assertTrue(s.contains("<b>Straggler-bound</b> — limiting stage: <b>balance</b>"), s);
    }

    @Test
    void emptyDirectoryStillGivesAReport(@TempDir Path dir) throws Exception {
        String s = Files.readString(RunReport.write(dir));
        for (String plot : RunReport.PLOTS) assertTrue(s.contains("data-plot=\"" + plot + "\""), plot);
        assertEquals(4, count(s, "data-empty=\"true\""));
    }

    @Test
    void aServedJobIsDescribedAsOneAndShowsEachRanksWaitRatio(@TempDir Path dir) throws Exception {
        // rank 0 waits 100 of every 400 ms, rank 1 300 of 400 (as serve --report-dir writes them: transfer and convert 0)
        for (int r = 0; r < 2; r++) {
            long wait = (r == 0 ? 100 : 300) * 1_000_000L, compute = 400_000_000L - wait;
            var steps = new StringBuilder();
            for (int i = 0; i < 5; i++) steps.append(i == 0 ? "" : ",").append("[" + wait + "," + compute + ",1000,2,0,0]");
            Files.writeString(dir.resolve("job-rank" + r + ".json"), "{\"rank\":" + r + ",\"world\":2,\"source\":\"service\","
                    + "\"elapsed_ms\":2000,\"steps\":[" + steps + "]}");
        }
        String html = Files.readString(RunReport.write(dir));
        assertTrue(html.contains("a served job (stoker serve --report-dir"), "described as a job, not ladder modes");
        assertFalse(html.contains("modes: job"));
        String perRank = html.substring(html.indexOf("id=\"per-rank\""));
        assertTrue(perRank.contains("job</td><td>0</td><td>5</td><td>0.250</td><td>0.250</td><td>100.0 ms</td><td>400.0 ms</td>"), perRank);
        assertTrue(perRank.contains("job</td><td>1</td><td>5</td><td>0.750</td><td>0.750</td><td>300.0 ms</td><td>400.0 ms</td>"), perRank);
    }

    /**
     * A cluster job's cache affinity (serve --join's {@code nodes[].cacheAffinity} and {@code cache_affinity}): a row per node
     * with its own hit rate, then the job's total; a run without it has no section. (CacheAffinityTest renders a real job's.)
     */
    @Test
    void cacheAffinityIsShownPerNodeAndForTheJob(@TempDir Path dir) throws Exception {
        String a = "\"localHits\":3,\"localMisses\":1,\"remoteHits\":4,\"remoteMisses\":0,\"fallbacks\":0,\"fetchedBytes\":2500000,"
                + "\"offered\":1,\"outboxDropped\":0,\"taken\":2,\"takenBytes\":9,\"takeDropped\":0,\"served\":5,\"servedBytes\":3000000";
        String b = "\"localHits\":1,\"localMisses\":0,\"remoteHits\":1,\"remoteMisses\":1,\"fallbacks\":1,\"fetchedBytes\":500000,"
                + "\"offered\":0,\"outboxDropped\":0,\"taken\":1,\"takenBytes\":9,\"takeDropped\":0,\"served\":0,\"servedBytes\":0";
        Files.writeString(dir.resolve("job-pipeline.json"), "{\"nodes\":[{\"address\":\"10.0.0.1:2551\",\"produced\":3,\"cacheAffinity\":{" + a
                + "}},{\"address\":\"10.0.0.2:2551\",\"produced\":2,\"cacheAffinity\":{" + b + "}},{\"address\":\"10.0.0.3:2551\"}],"
                + "\"cache_affinity\":{\"localHits\":4,\"localMisses\":1,\"remoteHits\":5,\"remoteMisses\":1,\"fallbacks\":1,"
                + "\"fetchedBytes\":3000000,\"offered\":1,\"taken\":3,\"served\":5,\"servedBytes\":3000000,\"hit_rate\":0.75}}");
        String html = Files.readString(RunReport.write(dir));
        String table = html.substring(html.indexOf("<table id=\"cache-affinity-table\">"));
        table = table.substring(0, table.indexOf("</table>"));
        assertTrue(table.contains("<td>job</td><td>10.0.0.1:2551</td><td>3 / 1</td><td>4 / 0</td><td>0</td><td>87.5%</td><td>2.5</td>"
                + "<td>1 / 2</td><td>5 (3.0)</td>"), table);
        assertTrue(table.contains("<td>10.0.0.2:2551</td><td>1 / 0</td><td>1 / 1</td><td>1</td><td>50.0%</td>"), table);
        assertFalse(table.contains("10.0.0.3"), "a node without the cache has no row");
        assertTrue(table.contains("<td>all nodes</td><td>4 / 1</td><td>5 / 1</td><td>1</td><td>75.0%</td><td>3.0</td><td>1 / 3</td>"), table);
        Files.writeString(dir.resolve("job-pipeline.json"), "{\"nodes\":[{\"address\":\"10.0.0.1:2551\"}]}");
        assertFalse(Files.readString(RunReport.write(dir)).contains("cache-affinity"));
    }

    /** The autotuner's decisions (docs/run-data.md {@code autotune}) are listed with their figures; an untuned run has no section. */
    @Test
    void autotuneDecisionsAreListedPerMode(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("zero-copy-pipeline.json"), "{\"autotune\":{\"enabled\":true,"
                + "\"start\":{\"threads\":1,\"fetch-concurrency\":1,\"prefetch-batches\":1},"
                + "\"now\":{\"threads\":2,\"fetch-concurrency\":8,\"prefetch-batches\":1},\"kept\":4,\"rolled_back\":1,"
                + "\"decisions\":[{\"index\":1,\"at_ms\":6500,\"knob\":\"threads\",\"from\":1,\"to\":2,\"outcome\":\"kept\","
                + "\"before_samples_per_s\":20.5,\"after_samples_per_s\":38.25,\"noise_samples_per_s\":2.0,\"before_wait_share\":0.9,"
                + "\"after_wait_share\":0.5,\"why\":\"CPU-bound: busy <100%>\"}]}}");
        String html = Files.readString(RunReport.write(dir));
        assertTrue(html.contains("<h2>Autotune</h2>"), html);
        assertTrue(html.contains("threads 1 → 2, fetch-concurrency 1 → 8, prefetch-batches 1 → 1; 4 kept, 1 rolled back"), html);
        assertTrue(html.contains("<td>1</td><td>6.5 s</td><td>threads</td><td>1 → 2</td><td>kept</td><td>20.5 → 38.3</td><td>±2.0</td>"
                + "<td>90% → 50%</td><td>CPU-bound: busy &lt;100%&gt;</td>"), html);
        Files.writeString(dir.resolve("zero-copy-pipeline.json"), "{\"verdict\":{\"kind\":\"CPU_BOUND\",\"stage\":\"encode\"}}");
        assertFalse(Files.readString(RunReport.write(dir)).contains("<h2>Autotune</h2>"));
    }

    @Test
    void summaryMatchesTheLaddersRule(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("prefetch-rank0.json"), "{\"rank\":0,\"world\":1,\"elapsed_ms\":2000,\"bytes_received\":5000000,"
                + "\"steps\":[[300000000,100000000,1,4,0],[0,100000000,1,4,0],[0,100000000,1,4,0],[100000000,100000000,1,4,0],[0,100000000,1,4,0]]}");
        RunData run = RunData.load(dir);
        assertEquals(1, run.modes().size());
        RunData.Summary s = RunData.summarize(run.modes().getFirst());
        assertEquals(400.0 / 900, s.waitRatio(), 1e-12);
        assertEquals(100.0 / 300, s.steadyWaitRatio(), 1e-12);
        assertEquals(20 / 2.0, s.samplesPerSecond(), 1e-12);
        assertEquals(300, s.firstBatchMillis(), 1e-9);
        assertEquals(80, s.meanWaitMillis(), 1e-9);
        // after the first 10% of the 5 steps (one step): 16 samples in 500 ms of wait + compute
        assertEquals(32, s.steadySamplesPerSecond(), 1e-9);
        String html = Files.readString(RunReport.write(dir));
        assertTrue(html.contains("<td>0.444</td><td>0.333</td><td>10.0</td><td>300 ms</td><td>80.0 ms</td><td>5</td>"), html);
    }

    @Test
    void skippedSamplesAreShownPerModeByKindAndCauseWithAnExample(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("prefetch-pipeline.json"), "{\"pipeline\":{\"skippedSamples\":14,\"errorSamples\":10,\"filteredSamples\":4,"
                + "\"skippedByStage\":{\"fetch\":9,\"decode\":1,\"tokenize\":4},\"skippedByCause\":["
                + "{\"kind\":\"error\",\"stage\":\"fetch\",\"reason\":\"file not found\",\"count\":9,\"example\":\"s3\"},"
                + "{\"kind\":\"filtered\",\"stage\":\"tokenize\",\"reason\":\"over --max-seq-len\",\"count\":4,\"example\":\"s<7>\"},"
                + "{\"kind\":\"error\",\"stage\":\"decode\",\"reason\":\"Premature end of JPEG file\",\"count\":1,\"example\":\"s9\"}]}}");
        Files.writeString(dir.resolve("zero-copy-pipeline.json"), "{\"pipeline\":{\"skippedSamples\":0,\"skippedByCause\":[]}}");
        Files.writeString(dir.resolve("serial-pipeline.json"), "{\"pipeline\":{\"skippedSamples\":2,\"skippedByStage\":{\"fetch\":2,\"decode\":0}}}");
        String s = Files.readString(RunReport.write(dir));
        String table = s.substring(s.indexOf("<section id=\"skipped\">"), s.indexOf("</section>", s.indexOf("<section id=\"skipped\">")));
        assertTrue(table.contains("<tr class=\"total\"><td>prefetch</td><td colspan=\"3\">10 errors, 4 filtered</td><td>14</td>"), table);
        assertTrue(table.contains("<tr><td>prefetch</td><td>error</td><td>fetch</td><td>file not found</td><td>9</td><td>s3</td></tr>"), table);
        assertTrue(table.contains("<tr><td>prefetch</td><td>filtered</td><td>tokenize</td><td>over --max-seq-len</td><td>4</td><td>s&lt;7&gt;</td></tr>"), table);
        assertTrue(table.indexOf(">file not found<") < table.indexOf(">over --max-seq-len<")
                && table.indexOf(">over --max-seq-len<") < table.indexOf(">Premature end of JPEG file<"), "in the run's order: most common first");
        assertTrue(table.contains("<tr><td>zero-copy</td><td colspan=\"5\">none skipped</td></tr>"), table);
        // a run recorded before causes were counted: its stages
        assertTrue(table.contains("<tr><td>serial</td><td>–</td><td>fetch</td><td>–</td><td>2</td><td></td></tr>"), table);
        assertFalse(table.contains("<td>serial</td><td>–</td><td>decode</td>"), "a stage with none is left out: " + table);
    }

    @Test
    void aRunWithoutSkipCountsSaysSo(@TempDir Path dir) throws Exception {
        SyntheticRun.write(dir, 5, false, "");
        assertTrue(Files.readString(RunReport.write(dir)).contains("Skipped samples: not recorded in this run."));
    }

    @Test
    void modeNamesFromFilesAreEscaped(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("a&b-rank0.json"), "{\"rank\":0,\"elapsed_ms\":10,\"bytes_received\":0,\"steps\":[[1,2,3,4,5]]}");
        String s = Files.readString(RunReport.write(dir));
        assertTrue(s.contains("a&amp;b"));
        assertFalse(s.contains("a&b"));
    }

    private static int count(String s, String needle) {
        int n = 0;
        for (int i = s.indexOf(needle); i >= 0; i = s.indexOf(needle, i + 1)) n++;
        return n;
    }
}
