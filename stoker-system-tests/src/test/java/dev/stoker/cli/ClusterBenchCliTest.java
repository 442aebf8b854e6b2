package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.netns.NetnsTestBed;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench cluster} end to end on two nodes: in network namespaces when this machine allows
 * them (root, ip, tc), else on 127.0.0.1 ({@code --no-netns}); real serve, node and trainer
 * processes. Every rank gets every step, and node 1's card carried at least the Flight bytes node 1
 * says it sent (the batches it made for rank 0 went from it straight to node 0).
 */
@Tag("slow")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ClusterBenchCliTest {
    @TempDir Path tmp;

    private Path dataset() throws Exception { return LadderCliTest.smallDataset(tmp).resolve("train.jsonl"); }

    @Test
    void twoNodesFeedTwoRanksAndTheBytesGoFromOwnerToRank() throws Exception {
        boolean netns = NetnsTestBed.unavailableReason().isEmpty();
        Path work = tmp.resolve("work");
        var args = new ArrayList<>(List.of("bench", "cluster", "--data", dataset().toString(), "--nodes", "2", "--ranks", "2",
                "--batch", "2", "--steps", "4", "--step-ms", "20", "--max-pixels", "50176", "--max-images", "2", "--warm-up-ms", "0", "--threads", "1",
                "--placement", "spread", "--node-heap", "512m", "--node-shm-budget", "256M", "--work-dir", work.toString()));
        if (!netns) args.add("--no-netns");
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err() + r.out());
        JsonNode j = new ObjectMapper().readTree(r.lastStdoutLine());
        assertEquals(netns, j.get("netns").asBoolean(), r.out());
        assertTrue(j.get("samples_per_s").asDouble() > 0, r.out());
        double wait = j.get("wait_ratio").asDouble();
        assertTrue(wait >= 0 && wait < 1, "wait ratio " + wait);
        assertEquals(2, j.get("per_node_bytes").size(), r.out());
        assertEquals(2, j.get("per_node_rx_bytes").size(), r.out());
        assertEquals(2, j.get("per_rank_wait_ratio").size(), r.out());
        assertEquals("[4,4]", j.get("steps_per_rank").toString(), "every rank got every step: " + r.out());
        assertEquals("[8,8]", j.get("samples_per_rank").toString(), r.out());
        assertEquals(16, j.get("samples").asLong());
        assertEquals("[0,1]", j.get("worker_nodes").toString(), "spread: one worker per node: " + r.out());
        assertEquals(0, j.get("dead_nodes").asInt(), r.out());
        // the coordinator (serve --join, node 0) holds every rank's measured wait, node 1's rank too: its trainer reported to node 1
        assertEquals(0, j.get("coordinator_refused_reports").asLong(), r.out());
        for (int rank = 0; rank < 2; rank++) {
            long measured = j.get("coordinator_steps_per_rank").get(rank).asLong();
            assertTrue(measured > 0 && measured <= 4, "rank " + rank + "'s steps measured at the coordinator: " + r.out());
            var w = j.get("coordinator_per_rank_wait_ratio").get(rank);
            assertTrue(w.isNumber() && w.asDouble() >= 0 && w.asDouble() <= 1, "rank " + rank + "'s wait ratio at the coordinator: " + r.out());
        }
        var remote = j.get("coordinator_per_node_wait_ratio").get(1);
        assertTrue(remote.isNumber() && remote.asDouble() >= 0 && remote.asDouble() <= 1, "the remote node's ranks' wait ratio: " + r.out());
        assertTrue(List.of("TRAINER_BOUND", "DATA_BOUND").contains(j.get("verdict").asText()), "a verdict over every rank: " + r.out());

        // rank 0 (node 0) pulls the batches node 1 made for it, and the other way round: nothing passes a third place
        long sent1 = j.get("per_node_flight_bytes_sent").get(1).asLong();
        long sent0 = j.get("per_node_flight_bytes_sent").get(0).asLong();
        assertTrue(sent1 > 0 && sent0 > 0, "each node lent batches to the other's rank: " + r.out());
        // (Flight counts its stream, a pull the batch as rewritten into the store: they differ by a few hundred bytes a batch)
        assertEquals(sent1, j.get("per_node_pulled_bytes").get(0).asLong(), sent1 / 100.0, "node 0 pulled what node 1 sent: " + r.out());
        assertEquals(sent0, j.get("per_node_pulled_bytes").get(1).asLong(), sent0 / 100.0, r.out());
        long made = 0, local = 0;
        for (JsonNode n : j.get("per_node_batches_made")) made += n.asLong();
        for (JsonNode n : j.get("per_node_local_handouts")) local += n.asLong();
        assertTrue(made >= 8, "at least the 8 batches the ranks took were made: " + r.out());
        assertTrue(local > 0, "batches made on a rank's own node are leased, not pulled: " + r.out());
        if (netns) {
            assertEquals("interfaces", j.get("bytes_source").asText());
            assertTrue(j.get("per_node_bytes").get(1).asLong() >= sent1,
                    "node 1's card sent at least the Flight bytes node 1 sent: " + r.out());
            assertTrue(j.get("per_node_rx_bytes").get(0).asLong() >= sent1, "node 0's card received them: " + r.out());
            assertTrue(j.get("link_utilisation").get(1).asDouble() > 0, r.out());
            // the switch's view, sampled while the trainers ran, saw node 1 send them too
            List<String> samples = Files.readAllLines(work.resolve("link-samples.csv"));
            assertEquals("t_ms,tx_bytes_0,rx_bytes_0,tx_bytes_1,rx_bytes_1", samples.getFirst());
            assertTrue(samples.size() >= 3, "a sample before, during and after: " + samples);
            long[] firstRow = java.util.Arrays.stream(samples.get(1).split(",")).mapToLong(Long::parseLong).toArray();
            long[] lastRow = java.util.Arrays.stream(samples.getLast().split(",")).mapToLong(Long::parseLong).toArray();
            assertTrue(lastRow[3] - firstRow[3] >= sent1, "switch port of node 1: " + samples);
            String mine = NetnsTestBed.DEFAULT_PREFIX + ProcessHandle.current().pid() + "x";
            assertTrue(NetnsTestBed.listNamespaces().stream().noneMatch(n -> n.startsWith(mine)),
                    "no namespace left: " + NetnsTestBed.listNamespaces());
        } else {
            assertEquals("flight_counters", j.get("bytes_source").asText());
            assertEquals(sent1, j.get("per_node_bytes").get(1).asLong());
        }
        try (var files = Files.list(work)) {
            assertTrue(files.noneMatch(p -> p.toString().endsWith(".sock")), "sockets removed");
        }
    }

    /**
     * {@code --epochs 2 --cache on}: epoch 1 (cold) makes every image's entry once and sends those homed on the other node
     * there; epoch 2, another order over the same nodes' caches, finds every one of them, at its maker or at its home, and
     * misses none. 16 demo samples (distinct crops), 2 ranks × batch 2: 4 steps an epoch.
     */
    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void secondEpochWithAffinityFindsEveryEntryTheFirstMade() throws Exception {
        Path manifest = new dev.stoker.testkit.DemoDatasetBuilder().build(dev.stoker.testkit.Vectors.projectDir().resolve("assets/photos"),
                tmp.resolve("demo"), 16, 5);
        Path work = tmp.resolve("epochs");
        var r = CliRunner.run("bench", "cluster", "--data", manifest.toString(), "--nodes", "2", "--ranks", "2", "--batch", "2",
                "--epochs", "2", "--cache", "on", "--cache-affinity", "on", "--step-ms", "0", "--max-pixels", "50176", "--max-images", "2",
                "--warm-up-ms", "0", "--threads", "1", "--node-heap", "512m", "--node-shm-budget", "256M", "--no-netns",
                "--work-dir", work.toString());
        assertEquals(0, r.status(), r.err() + r.out());
        JsonNode j = new ObjectMapper().readTree(r.lastStdoutLine());
        assertTrue(j.get("cache").asBoolean() && j.get("cache_affinity").asBoolean(), r.out());
        JsonNode e1 = j.get("epochs").get(0), e2 = j.get("epochs").get(1);
        assertEquals(2, j.get("epochs").size(), r.out());
        for (JsonNode e : List.of(e1, e2)) {
            assertEquals(4, e.get("steps").asInt(), "one epoch: 16 samples over 2 ranks × batch 2: " + r.out());
            assertEquals(16, e.get("samples").asLong(), r.out());
            assertTrue(e.get("ok").asBoolean() && e.get("samples_per_s").asDouble() > 0, r.out());
        }
        assertEquals(2, e2.get("seed").asLong() - e1.get("seed").asLong() + 1, "each epoch its own order: " + r.out());
        long entries = j.get("entries").asLong();
        assertEquals(e1.get("reads").asLong(), entries, r.out());
        assertTrue(entries >= 12, "the demo samples' images were read: " + r.out());
        // epoch 1 is cold: every read a miss, or a fallback (a home that did not answer within its deadline: the maker decodes
        // and keeps the entry itself, and does not ask that home again until it answers a probe — before the channels were
        // opened ahead, one slow first ask at the job's start on this loaded VM made every remote read of a 5 s epoch a
        // fallback); what a node offered the other went there
        assertEquals(0, e1.get("hits").asLong(), r.out());
        long fallbacks1 = e1.get("fallbacks").asLong(), fallbacks2 = e2.get("fallbacks").asLong();
        assertEquals(entries, e1.get("misses").asLong() + fallbacks1, r.out());
        assertTrue(e1.get("offered").asLong() + fallbacks1 > 0, "a node made entries homed on the other: " + r.out());
        assertEquals(e1.get("offered").asLong(), e1.get("taken").asLong(), "what a node offered the other, the other took: " + r.out());
        // epoch 2, another order: every entry found, at its maker or at its home. A fallback is a home that did not answer
        // within the deadline (5 s a fetch, 2 s an offer): a timing effect of a loaded machine (seen at load 13-20 on this
        // 2-core VM), counted, never a wrong entry; an entry epoch 1 kept off its home that way is epoch 2's only miss
        assertEquals(entries, e2.get("hits").asLong() + e2.get("misses").asLong() + fallbacks2, r.out());
        assertTrue(e2.get("misses").asLong() <= fallbacks1, "a miss only where epoch 1 fell back: " + r.out());
        if (fallbacks1 + fallbacks2 == 0) {
            assertEquals(entries, e2.get("hits").asLong(), r.out());
            assertEquals(1.0, e2.get("hit_rate").asDouble(), r.out());
        }
        assertEquals(e2.get("hits").asLong(), e2.get("hits_local").asLong() + e2.get("hits_at_home").asLong(), r.out());
        long atHome = e2.get("hits_at_home").asLong();
        assertTrue(atHome + fallbacks2 > 0, "another order puts samples on the node that is not their home: " + r.out());
        assertEquals(atHome > 0, e2.get("cache_bytes_between_nodes").asLong() > 0, "the homes sent what was found there: " + r.out());
        assertTrue(e2.get("offered").asLong() <= e2.get("misses").asLong(), "only a miss has something new to send home: " + r.out());
        JsonNode run2 = j.get("runs").get(1);
        long fetched = 0;
        for (JsonNode n : run2.get("per_node_cache_stats")) fetched += n.get("fetchedBytes").asLong() + n.get("takenBytes").asLong();
        assertEquals(e2.get("cache_bytes_between_nodes").asLong(), fetched, "the nodes' own figures add up: " + r.out());
        assertEquals(2, j.get("speedup").size(), r.out());
        assertEquals(1.0, j.get("speedup").get(0).asDouble(), r.out());
        // each node's cache in a folder of its own, kept from epoch to epoch
        assertTrue(Files.isDirectory(work.resolve("cache/node0")) && Files.isDirectory(work.resolve("cache/node1")), r.out());
    }

    @Test
    void aNodeThatCannotStartFailsTheRunWithItsLog() throws Exception {
        // a node store too small for any batch of the job: serve refuses it at start, before it joins; node 1, still joining
        // the seed that is gone, stops at once when the run stops it
        long started = System.nanoTime();
        var r = CliRunner.run("bench", "cluster", "--data", dataset().toString(), "--nodes", "2", "--steps", "2", "--batch", "2",
                "--max-pixels", "50176", "--max-images", "2", "--node-shm-budget", "1M", "--no-netns", "--node-heap", "256m",
                "--work-dir", tmp.resolve("work2").toString());
        assertTrue(r.status() != 0, r.out());
        assertTrue(r.err().contains("node 0 (serve) exited"), r.err());
        assertTrue(r.err().contains("--- last lines of"), r.err());
        assertTrue(r.err().contains("Raise --node-shm-budget"), "the tail of serve's log says why: " + r.err());
        System.out.printf("ClusterBenchCliTest: the failed run took %.1f s%n", (System.nanoTime() - started) / 1e9);
    }
}
