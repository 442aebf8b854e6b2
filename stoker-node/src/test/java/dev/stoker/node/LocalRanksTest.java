package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.pipeline.feed.RankRange;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code --local-ranks}: a node serving ranks 2-3 of a world of 4 (and one of rank 3 alone handing
 * out copies) hands those ranks exactly the batches a node serving the whole world hands them (the
 * schedule is the world's), refuses a trainer of another rank naming its range, sizes its shared
 * memory for its own ranks only, and refuses a range outside the world.
 */
@Tag("slow")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LocalRanksTest {
    static final int SAMPLES = 24, WORLD = 4, BATCH = 2, STEPS = 2;
    @TempDir Path tmp;

    private NodeConfig.Builder config(Path manifest, String name) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).ranks(WORLD).batch(BATCH).steps(STEPS).processor(ProcessorPreset.QWEN2_VL)
                .pixels(3136, 50176).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048).threads(2).warmUpMillis(0).set(NodeConfig.JOB, name);
    }

    @Test
    void aNodeOfRanks2To3GivesThemTheWholeWorldsBatchesAndRefusesRank0() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        var whole = config(manifest, "whole").shmBudgetBytes(256L << 20).build();
        var probe = config(manifest, "part").set(NodeConfig.LOCAL_RANKS, new RankRange(2, 3)).build();
        // a budget enough for two ranks and not for four: the node must count only its own
        long budget = 2 * probe.shm().rankNeedBytes();
        var part = config(manifest, "part").set(NodeConfig.LOCAL_RANKS, new RankRange(2, 3)).shmBudgetBytes(budget).build();
        // and a node of rank 3 alone handing out copies (--mode prefetch): the same batches, byte for byte
        var copies = config(manifest, "copies").set(NodeConfig.LOCAL_RANKS, RankRange.parse("3"))
                .mode(dev.stoker.pipeline.feed.FeedMode.PREFETCH).build();
        var lines = new ArrayList<String>();
        try (var all = StokerNode.launch(whole); var node = StokerNode.launch(part, lines::add); var single = StokerNode.launch(copies);
             var c = TrainerClient.connect(single.socket(), 3, WORLD, "copies", TrainerClient.Options.COPY)) {
            assertFalse(c.sharedMemory());
            assertTrue(lines.getFirst().contains("4 ranks (this node serves ranks 2-3) × batch 2"), lines.getFirst());
            assertEquals(budget, node.ledger().store().budgetBytes());
            for (int rank = 2; rank <= 3; rank++) {
                try (var a = TrainerClient.connect(all.socket(), rank, WORLD, "whole", TrainerClient.Options.SHARED_MEMORY);
                     var b = TrainerClient.connect(node.socket(), rank, WORLD, "part", TrainerClient.Options.SHARED_MEMORY)) {
                    assertEquals(a.welcome().fingerprint(), b.welcome().fingerprint(), "the same job");
                    for (int s = 0; s < STEPS; s++) {
                        try (var x = a.next(); var y = b.next()) {
                            assertEquals(x.batch().meta(), y.batch().meta(), "rank " + rank + " step " + s);
                            assertEquals(names(x), names(y));
                            for (int t = 0; t < x.batch().tensors().size(); t++)
                                assertArrayEquals(bytes(x, t), bytes(y, t),
                                        "rank " + rank + " step " + s + " " + x.batch().tensors().get(t).name());
                            assertEquals(rank, y.batch().meta().rank());
                            assertTrue(y.batch().sampleIndex().length > 0, "samples, not an empty batch");
                            if (rank == 3) {
                                try (var z = c.next()) {
                                    assertEquals(x.batch().meta(), z.batch().meta(), "copies: step " + s);
                                    for (int t = 0; t < x.batch().tensors().size(); t++)
                                        assertArrayEquals(bytes(x, t), bytes(z, t), "copies: step " + s + " " + x.batch().tensors().get(t).name());
                                }
                            }
                        }
                    }
                }
            }
            var refused = assertThrows(IOException.class, () -> TrainerClient.connect(node.socket(), 0, WORLD, "part"));
            assertTrue(refused.getMessage().contains("rank 0 is not served by this node: it serves ranks 2-3 of 4"), refused.getMessage());
            var notHere = assertThrows(IOException.class, () -> TrainerClient.connect(single.socket(), 2, WORLD, "copies"));
            assertTrue(notHere.getMessage().contains("it serves ranks 3 of 4"), notHere.getMessage());
            var wrongWorld = assertThrows(IOException.class, () -> TrainerClient.connect(node.socket(), 2, 2, "part"));
            assertTrue(wrongWorld.getMessage().contains("world size 2 differs from the job's 4"), wrongWorld.getMessage());
            // per-rank entries: this node's ranks only, each with its global number
            @SuppressWarnings("unchecked")
            var ranks = (List<Map<String, Object>>) node.ledger().ledgerMetrics().get("ranks");
            assertEquals(List.of(2, 3), ranks.stream().map(m -> m.get("rank")).toList());
            assertEquals(List.of(2, 3), node.ledger().feeder().metrics().ranks().stream().map(r -> r.rank()).toList());
            assertEquals(2, node.ledger().feeder().timeline().ranks());
        }
        assertFalse(Files.exists(part.get(NodeConfig.SOCKET)));
    }

    @Test
    void theZeroCopyBudgetCountsOnlyTheLocalRanks() {
        var b = NodeConfig.builder().ranks(WORLD).batch(BATCH).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176)
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048);
        long need = b.build().shm().rankNeedBytes();
        assertTrue(need > 0);
        var local = b.set(NodeConfig.LOCAL_RANKS, RankRange.parse("2-3")).shmBudgetBytes(2 * need).build();
        local.shm().check(); // two ranks' needs: enough
        var single = NodeConfig.builder().ranks(WORLD).batch(BATCH).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176)
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048).set("local-ranks", "1").shmBudgetBytes(need).build();
        single.shm().check();
        var world = b.set(NodeConfig.LOCAL_RANKS, null).build(); // the same budget for all four ranks is not
        var e = assertThrows(ConfigException.class, () -> world.shm().check());
        assertTrue(e.getMessage().contains("gives each of the 4 ranks"), e.getMessage());
        var three = b.set("local-ranks", "0-2").build();
        e = assertThrows(ConfigException.class, () -> three.shm().check());
        assertTrue(e.getMessage().contains("each of the 3 ranks this node serves (--local-ranks 0-2)"), e.getMessage());
    }

    @Test
    void aRangeOutsideTheWorldOrMalformedIsRefused() {
        var e = assertThrows(ConfigException.class, () -> NodeConfig.builder().ranks(4).set("local-ranks", "3-4").build());
        assertTrue(e.getMessage().contains("--local-ranks 3-4 is outside the job's ranks 0-3"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> NodeConfig.builder().ranks(4).set("local-ranks", "3-1").build());
        assertTrue(e.getMessage().startsWith("--local-ranks: "), e.getMessage());
        e = assertThrows(ConfigException.class, () -> NodeConfig.builder().ranks(4).set("local-ranks", "two").build());
        assertTrue(e.getMessage().contains("expected A-B"), e.getMessage());
        assertEquals(new RankRange(0, 3), NodeConfig.builder().ranks(4).build().localRanks(), "default: every rank");
        assertEquals(new RankRange(2, 2), NodeConfig.builder().ranks(4).set("local-ranks", "2").build().localRanks());
    }

    private static byte[] bytes(TrainerClient.Received r, int tensor) {
        return r.batch().tensors().get(tensor).data().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
    }

    private static List<String> names(TrainerClient.Received r) {
        return r.batch().tensors().stream().map(t -> t.name()).toList();
    }
}
