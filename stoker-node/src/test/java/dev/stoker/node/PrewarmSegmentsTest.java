package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.core.ProcessorPreset;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The zero-copy store's start-up segments and the prefetch buffer's default in bytes (issue 30's memory item): the
 * segments follow what a rank's buffer can hold in bytes, not {@code --prefetch-batches} alone, plus the two batches being
 * filled and the trainer's two leases (what a rank holds at once: fewer, and the store makes the rest mid-epoch); 128 MiB
 * holds one batch of 8 images at 451,584 pixels (float32, 87 MB), so such a job prepares 5 segments per rank.
 */
@Timeout(60)
class PrewarmSegmentsTest {
    private static NodeConfig.Builder job(int ranks, int batch, long maxPixels) {
        return NodeConfig.builder().data("d.jsonl").ranks(ranks).batch(batch).processor(ProcessorPreset.QWEN2_VL).pixels(3136, maxPixels);
    }

    @Test
    void thePrefetchBufferDefaultsTo128MiB() {
        assertEquals(128L << 20, dev.stoker.pipeline.feed.FeedConfig.PREFETCH_BYTES_DEFAULT);
        assertEquals(128L << 20, job(1, 8, 451584).build().get(NodeConfig.PREFETCH_BYTES));
    }

    @Test
    void largeBatchesPrepareWhatTheBufferHoldsInBytesPlusTheFillsAndTheLeases() {
        var config = job(1, 8, 451584).build();
        assertEquals(8L * 2304 * 1176 * 4, config.oneBatchBytes(), "8 images of 2304 patches of 1176 float32");
        assertEquals(1 + 2 + 2, NodeFeeds.prewarmSegments(config), "128 MiB holds one 87 MB batch; two filling, two leased");
        assertEquals(2, dev.stoker.pipeline.feed.Feeder.BATCHES_FILLING);
        assertEquals(2, ShmBudget.LEASES_PER_TRAINER);
        assertEquals(2 * (1 + 4), NodeFeeds.prewarmSegments(job(2, 8, 451584).build()), "per local rank");
        var roomy = job(1, 8, 451584).set(NodeConfig.PREFETCH_BYTES, 1L << 30).build();
        assertEquals(4 + 4, NodeFeeds.prewarmSegments(roomy), "1 GiB holds 12 such batches; --prefetch-batches 4 bounds it");
    }

    /** Each prepared segment holds twice a batch of single-image samples (multi-image headroom); one under --shm-resident. */
    @Test
    void preparedSegmentsHoldTwoBatchesOfSingleImageSamplesOrOneUnderAResidentLimit() {
        var config = job(1, 8, 451584).build();
        assertEquals(2 * config.oneBatchBytes(), NodeFeeds.prewarmBytes(config));
        var lean = job(1, 8, 451584).set("shm-resident", "1G").build();
        assertEquals(lean.oneBatchBytes(), NodeFeeds.prewarmBytes(lean));
    }

    /** A video job's largest batch from its data, where it is known, is what each segment holds, and what the buffer counts in. */
    @Test
    void aVideoJobsDataBatchSizesItsSegments() {
        var config = job(1, 4, 451584).build();
        long videoBatch = 225_623_040L; // the cache restart's 24 clips, 4 to a batch (docs/benchmarks.md)
        assertEquals(videoBatch, NodeFeeds.prewarmBytes(config, videoBatch));
        assertEquals(1 + 2 + 2, NodeFeeds.prewarmSegments(config, videoBatch), "128 MiB holds none: one buffered, two filling, two leased");
        assertEquals(NodeFeeds.prewarmBytes(config), NodeFeeds.prewarmBytes(config, -1), "unknown: the image rule");
        assertEquals(NodeFeeds.prewarmSegments(config), NodeFeeds.prewarmSegments(config, -1));
    }

    @Test
    void smallBatchesAreBoundedByThePrefetchBatches() {
        var small = job(1, 4, 50176).build(); // 4 × 256 patches × 1176 × 4 B = 4.8 MB a batch
        assertEquals(4 + 4, NodeFeeds.prewarmSegments(small));
        assertEquals(2 + 4, NodeFeeds.prewarmSegments(job(1, 4, 50176).set(NodeConfig.PREFETCH_BATCHES, 2).build()));
    }
}
