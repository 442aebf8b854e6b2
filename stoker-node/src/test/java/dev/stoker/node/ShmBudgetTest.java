package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.ModelFolders;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The shared memory a local job needs: the largest batch or pack the configuration can make, a rank's need (its
 * trainer's leases and the batch being filled), the default budget, and the refusal of a budget too small, which names
 * the values in force (the processor's or the model's pixel cap where none was given), never a raw key's null.
 */
@Timeout(30)
class ShmBudgetTest {
    @TempDir Path tmp;

    /** Two ranks of batches of 4 single-image samples of at most 2048 tokens, at Qwen2-VL's processor. */
    private static NodeConfig.Builder job() {
        return NodeConfig.builder().data("d.jsonl").ranks(2).batch(4).processor(ProcessorPreset.QWEN2_VL)
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048);
    }

    @Test
    void aRankNeedsItsTrainersLeasesAndTheBatchBeingFilledEachTheLargestInItsSegmentSize() {
        var shm = job().pixels(3136, 50176).build().shm();
        long largest = shm.largestBatchBytes();
        assertTrue(largest > 0, "bounded by --max-seq-len and --max-images");
        assertEquals(ShmObjectStore.sizeClass(largest) * (ShmBudget.LEASES_PER_TRAINER + 1), shm.rankNeedBytes());
        assertTrue(job().batch(8).pixels(3136, 50176).build().shm().largestBatchBytes() > largest, "twice the samples");
        assertTrue(job().pixels(3136, 200704).build().shm().largestBatchBytes() > largest, "a higher pixel cap");
        assertTrue(job().pixels(3136, 50176).pixelFormat(PixelFormat.UINT8).build().shm().largestBatchBytes() < largest,
                "uint8 pixels are 1/8 of the float32 rows");
        assertTrue(job().pixels(3136, 50176).set(NodeConfig.MAX_IMAGES, 0).build().shm().largestBatchBytes() > largest,
                "without --max-images a sample may carry as many images as it has tokens for");
        var unbounded = job().set(NodeConfig.MAX_SEQ_LEN, 0).set(NodeConfig.MAX_IMAGES, 0).build().shm();
        assertEquals(-1, unbounded.largestBatchBytes());
        assertEquals(-1, unbounded.rankNeedBytes());
    }

    /** The pixel cap in force is the one sized for, whether given, the processor's or the model's. */
    @Test
    void theLargestBatchIsSizedAtThePixelCapInForceNotTheRawKey() throws Exception {
        long processors = ProcessorPreset.QWEN2_VL.vision().maxPixels();
        var byDefault = job().build();
        assertEquals(null, byDefault.get(NodeConfig.MAX_PIXELS), "the key's default is derived");
        assertEquals(job().pixels(ProcessorPreset.QWEN2_VL.vision().minPixels(), processors).build().shm().largestBatchBytes(),
                byDefault.shm().largestBatchBytes());
        Path model = ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl");
        var fromModel = NodeConfig.builder().data("d.jsonl").ranks(2).batch(4).set(NodeConfig.MODEL, model)
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048).build();
        var byHand = NodeConfig.builder().data("d.jsonl").ranks(2).batch(4).processor(ProcessorPreset.QWEN3_VL)
                .set(NodeConfig.MAX_IMAGES, 1).set(NodeConfig.MAX_SEQ_LEN, 2048).build();
        assertEquals(byHand.shm().largestBatchBytes(), fromModel.shm().largestBatchBytes());
    }

    @Test
    void aBudgetThatCannotHoldEveryRanksNeedIsRefusedNamingTheValuesInForce() {
        long need = job().build().shm().rankNeedBytes();
        job().shmBudgetBytes(2 * need).build().shm().check(); // two ranks' needs: enough
        var short1 = job().shmBudgetBytes(2 * need - 1).build();
        var e = assertThrows(ConfigException.class, () -> short1.shm().check());
        String m = e.getMessage();
        assertTrue(m.startsWith("--shm-budget " + (2 * need - 1) + " gives each of the 2 ranks " + (need - 1) + " bytes, and a rank needs "
                + need + ": its trainer may hold 2 batches while the next is filled"), m);
        assertTrue(m.contains("(--batch 4, each sample at --max-seq-len 2048 with up to 1 images at --max-pixels "
                + ProcessorPreset.QWEN2_VL.vision().maxPixels() + " (the processor's), float32)"), m);
        assertTrue(m.endsWith("Raise --shm-budget to " + 2 * need + ", or lower --batch, --max-pixels, --max-seq-len or --max-images"), m);
        assertFalse(m.contains("null"), m);

        var given = job().pixels(3136, 50176).shmBudgetBytes(1 << 20).build();
        String g = assertThrows(ConfigException.class, () -> given.shm().check()).getMessage();
        assertTrue(g.contains("at --max-pixels 50176, float32)"), "a cap given is named as given: " + g);

        var unbounded = job().set(NodeConfig.MAX_SEQ_LEN, 0).set(NodeConfig.MAX_IMAGES, 0).build();
        assertTrue(assertThrows(ConfigException.class, () -> unbounded.shm().check()).getMessage()
                .startsWith("--max-seq-len 0 leaves a batch's size unbounded"));
    }

    @Test
    void aPackedJobIsSizedAndRefusedByItsLargestPack() {
        var packed = NodeConfig.builder().data("d.jsonl").ranks(1).packTokens(4096).processor(ProcessorPreset.QWEN2_VL);
        long largest = packed.build().shm().largestBatchBytes();
        assertTrue(largest > 0, "a pack is bounded by its tokens");
        assertTrue(packed.packPatches(1024).build().shm().largestBatchBytes() < largest, "and by its patches, when given");
        var low = packed.packPatches(0).shmBudgetBytes(1 << 20).build();
        String m = assertThrows(ConfigException.class, () -> low.shm().check()).getMessage();
        assertTrue(m.contains("its trainer may hold 2 packs while the next is filled, and the largest pack this configuration can make is "
                + largest + " bytes (--pack-tokens 4096, every token an image token)"), m);
        var patches = packed.packPatches(1024).shmBudgetBytes(1 << 20).build();
        assertTrue(assertThrows(ConfigException.class, () -> patches.shm().check()).getMessage()
                .contains("(--pack-tokens 4096, --pack-patches 1024)"));
    }

    /** Without --shm-budget: every rank's need and at least 4 GiB, but no more than half the folder's free space. */
    @Test
    void theDefaultBudgetIsTheRanksNeedAtLeast4GiBAndAtMostHalfTheFreeSpace() throws Exception {
        assertEquals(3L << 20, job().shmBudgetBytes(3L << 20).build().shm().budgetBytes(), "as given");
        var config = job().shmDir(tmp).build();
        long need = config.shm().rankNeedBytes();
        assertTrue(2 * need < StoreConfig.DEFAULT_BUDGET_BYTES, "this job's ranks need less than the floor");
        assertDefault(StoreConfig.DEFAULT_BUDGET_BYTES, config.shm());
        assertEquals(config.shm().budgetBytes(), config.shmBudgetBytes());
        var big = NodeConfig.builder().data("d.jsonl").ranks(8).batch(64).shmDir(tmp).build(); // no --max-images: every token an image
        long bigNeed = big.shm().rankNeedBytes();
        assertTrue(8 * bigNeed > StoreConfig.DEFAULT_BUDGET_BYTES, "this one's ranks need more than the floor");
        assertDefault(8 * bigNeed, big.shm());
    }

    /** The default budget is {@code wanted}, or half the folder's free space when less (which others' files change meanwhile). */
    private void assertDefault(long wanted, ShmBudget shm) throws Exception {
        long before = Files.getFileStore(tmp).getUsableSpace();
        long budget = shm.budgetBytes();
        long after = Files.getFileStore(tmp).getUsableSpace();
        long low = Math.max(1, Math.min(wanted, Math.min(before, after) / 2));
        long high = Math.max(1, Math.min(wanted, Math.max(before, after) / 2));
        assertTrue(budget >= low && budget <= high, budget + " not in [" + low + ", " + high + "] for " + wanted + " wanted");
    }
    /**
     * Issue 31, item 6: with the data's largest batch (one- and two-image samples of a made-up index), a rank needs what
     * its batches really take, far below the worst case, and a budget that refuses the worst case holds it; a packed job
     * keeps --pack-tokens's bound.
     */
    @Test
    void theDataLargestBatchSizesTheNeedFarBelowTheWorstCase() {
        var config = job().pixels(3136, 451584).set(NodeConfig.MAX_IMAGES, 0).set(NodeConfig.MAX_SEQ_LEN, 8192).batch(8).build();
        var shapes = dev.stoker.plan.pack.ShapeIndex.of(java.util.List.of(dev.stoker.plan.pack.SampleShape.of(420, 576),
                dev.stoker.plan.pack.SampleShape.of(900, 2304, 2304), dev.stoker.plan.pack.SampleShape.of(300, 396),
                dev.stoker.plan.pack.SampleShape.of(1250, 2304), dev.stoker.plan.pack.SampleShape.of(610, 1200, 396)));
        var worst = config.shm();
        var largest = dev.stoker.encode.batch.LargestBatch.padded(config.encodeOptions(), 8, shapes, false);
        var data = worst.withData(largest, "a made-up index");
        assertEquals(largest.bytes(), data.largestBatchBytes());
        assertEquals(worst.worstCaseBatchBytes(), data.worstCaseBatchBytes());
        assertTrue(data.rankNeedBytes() * 10 < worst.rankNeedBytes(), data.rankNeedBytes() + " vs " + worst.rankNeedBytes());
        long budget = data.rankNeedBytes() * 2;
        var given = job().pixels(3136, 451584).set(NodeConfig.MAX_IMAGES, 0).set(NodeConfig.MAX_SEQ_LEN, 8192).batch(8)
                .shmBudgetBytes(budget).build().shm();
        assertFalse(given.worstCaseFits());
        assertThrows(ConfigException.class, given::check, "the worst case does not fit");
        given.withData(largest, "a made-up index").check(); // the data's does
        assertTrue(data.sizedFrom().contains("data's largest batch, " + largest.bytes() + " bytes (a made-up index)"), data.sizedFrom());
        var packed = NodeConfig.builder().data("d.jsonl").ranks(1).packTokens(4096).processor(ProcessorPreset.QWEN2_VL).build().shm();
        assertThrows(IllegalArgumentException.class, () -> packed.withData(largest, "x"));
    }
}
