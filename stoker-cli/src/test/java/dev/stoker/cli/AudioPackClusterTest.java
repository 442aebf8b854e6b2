package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.cluster.ClusteredNode;
import dev.stoker.node.NodeConfig;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audio packs on the cluster (issue 32, docs/cluster.md "Packing"): a packed Qwen2.5-Omni job ({@link AudioCliTest#RECORDS}:
 * WAV, MP3, two clips, a video with its audio track, an HF typed FLAC item; clips made by FFmpeg at test time) on a
 * two-member loopback cluster ({@code serve --join --pack-tokens} with a {@code stoker node} member, a worker each): the packs
 * are {@code plan --pack-tokens}'s per (step, rank), made on both nodes and one pulled over Flight with its clips, every
 * sample once in step 0.
 */
@Tag("slow")
@Timeout(120)
class AudioPackClusterTest {
    static final int RECORDS = 5, RANKS = AudioFamiliesPackTest.RANKS, STEPS = AudioFamiliesPackTest.STEPS;
    @TempDir static Path tmp;
    private static Path manifest;
    private static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll
    static void data() throws Exception {
        manifest = AudioServeTest.writeData(tmp);
    }

    static int freePort() throws IOException { return AudioWireTest.freePort(); }

    private static NodeConfig.Builder member(NodeConfig.Builder base, String seed, String self, String name) throws IOException {
        return AudioWireTest.member(tmp, base, seed, self, name);
    }

    /**
     * {@code serve --join --processor qwen2.5-omni --pack-tokens N} with a member ({@code stoker node}): a worker on each node
     * makes packs, the two ranks' trainers on the coordinator's node take them by lease and, the other node's, pulled over
     * Flight; the packs are plan's per (step, rank), every sample once in step 0.
     */
    @Test
    @SuppressWarnings("unchecked")
    void aClusterDeliversPlansPacksOfQwen25Omni() throws Exception {
        // AudioPackTest's pack size: its video sample (at Qwen2.5-Omni's call-time frame size) fits, so every step has a vision input
        var planned = AudioFamiliesPackTest.plan("qwen2.5-omni", manifest, AudioPackTest.PACK_TOKENS, "--min-pixels", "3136", "--max-pixels", "50176");
        String seed = "127.0.0.1:" + freePort();
        var job = NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").ranks(RANKS).packTokens(AudioPackTest.PACK_TOKENS)
                .steps(STEPS).seed(AudioFamiliesPackTest.SEED).pixels(3136, 50176).set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1)
                .threads(2).warmUpMillis(0).set(NodeConfig.JOB, "cluster").set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2);
        var coordinatorConfig = member(job, seed, "127.0.0.1:" + freePort(), "coord").build();
        assertNull(coordinatorConfig.audioFeedRefusal());
        var served = new LinkedHashMap<String, List<Long>>();
        try (var a = ClusteredNode.launchMember(member(NodeConfig.builder(), seed, seed, "a").build(), line -> {});
             var c = ClusteredNode.launchCoordinator(coordinatorConfig, line -> {})) {
            try (var t0 = TrainerClient.connect(c.socket(), 0, RANKS, "cluster", TrainerClient.Options.SHARED_MEMORY);
                 var t1 = TrainerClient.connect(c.socket(), 1, RANKS, "cluster", TrainerClient.Options.SHARED_MEMORY)) {
                for (int s = 0; s < STEPS; s++)
                    for (var t : List.of(t0, t1))
                        try (var got = t.next()) {
                            var b = got.batch();
                            String key = b.meta().globalStep() + "/" + b.meta().rank();
                            assertEquals(1, b.tensor("input_ids").shape()[0], key + ": a pack is one row");
                            assertEquals(b.sampleIndex().length + 1, b.tensor("cu_seqlens").toInts().length, key + ": a segment per sample");
                            int clips = 0;
                            for (long i : b.sampleIndex()) if (i >= 0) clips += JSON.readTree(AudioCliTest.RECORDS).get((int) i).path("audios").size();
                            if (clips > 0) assertTrue(b.tensor("input_features").shape()[0] >= clips, key + ": its clips travel with it");
                            assertNull(served.put(key, Arrays.stream(b.sampleIndex()).boxed().toList()), key + " twice");
                        }
            }
            var stats = (List<dev.stoker.cluster.NodeProtocol.NodeStats>) c.metrics().get("nodes");
            assertEquals(2, stats.size(), stats.toString());
            assertTrue(stats.stream().allMatch(n -> n.produced() > 0), "each node made a pack: " + stats);
            assertTrue(stats.stream().anyMatch(n -> n.flightBatchesSent() > 0) && stats.stream().anyMatch(n -> n.pulledBatches() > 0),
                    "a pack pulled over Flight: " + stats);
        }
        assertEquals(planned, served, "the cluster's packs are plan's, per (step, rank)");
        var first = new ArrayList<Long>();
        for (int rank = 0; rank < RANKS; rank++) first.addAll(served.get("0/" + rank));
        first.removeIf(x -> x < 0);
        assertEquals(RECORDS, first.size(), "step 0 " + first);
        assertEquals(RECORDS, new HashSet<>(first).size(), "every sample once in step 0 " + first);
    }
}
