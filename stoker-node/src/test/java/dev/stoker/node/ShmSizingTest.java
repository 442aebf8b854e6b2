package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.batch.LargestBatch;
import dev.stoker.encode.validate.LengthIndex;
import dev.stoker.plan.pack.SampleShape;
import dev.stoker.plan.pack.ShapeIndex;
import dev.stoker.source.mix.DataSources;
import dev.stoker.testkit.SmallJpegDataset;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A local node sizes its shared memory from the data (issue 31, item 6): where the configuration's worst case would not
 * fit — here a sample may hold 4M tokens of images at a 451,584-pixel cap, which no machine's /dev/shm holds three of — the
 * samples' shapes are read (stoker validate's length index first, else a header scan of a small local data set), the store
 * is sized for the real largest batch and the node starts and serves with no --shm-budget; where the shapes cannot be had
 * cheaply the worst case stays; and a batch past what the store was sized for (a data set that changed under its index)
 * fails the feed with an error naming its samples, never a hang.
 */
@Timeout(120)
class ShmSizingTest {
    private static final int RECORDS = 24, BATCH = 4, STEPS = 3;
    @TempDir Path tmp;

    /** One rank of batches of 4 one- or two-image samples (images of 64 to 639 pixels a side) at a cap far above them. */
    private NodeConfig.Builder job(Path manifest) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).ranks(1).batch(BATCH).processor(ProcessorPreset.QWEN2_VL)
                .pixels(3136, 451584).set(NodeConfig.MAX_SEQ_LEN, 1 << 22).pixelFormat(PixelFormat.UINT8)
                .set(NodeConfig.INDEX_CACHE, Files.createDirectories(tmp.resolve("index")).toString())
                .shmDir(Files.createDirectories(tmp.resolve("shm"))).socket(tmp.resolve("node.sock"))
                .set(NodeConfig.PREFETCH_BATCHES, 1).threads(2).warmUpMillis(0).steps(STEPS);
    }

    private Path dataset() throws IOException { return SmallJpegDataset.write(tmp.resolve("ds"), RECORDS, 31); }

    @Test
    void whereTheWorstCaseCannotFitALocalDataSetIsScanned() throws Exception {
        var config = job(dataset()).build();
        var worst = config.shm();
        assertFalse(worst.worstCaseFits());
        assertThrows(ConfigException.class, worst::check, "the worst case is refused: what the node did before");
        var lines = new ArrayList<String>();
        try (var feeds = NodeFeeds.open(config)) {
            var shm = feeds.shmBudget(lines::add);
            assertTrue(shm.fromData(), shm.sizedFrom());
            assertTrue(shm.dataSource().startsWith("a header scan of " + RECORDS + " records"), shm.dataSource());
            assertTrue(shm.largestBatchBytes() * 1000 < worst.largestBatchBytes(), shm.largestBatchBytes() + " vs " + worst.largestBatchBytes());
            assertTrue(shm.largestBatchBytes() > BATCH * 64 * 64 * 3, "at least a batch of the smallest images");
            shm.check();
            assertTrue(shm.sizedFrom().startsWith("sized from the data's largest batch, " + shm.largestBatchBytes() + " bytes (a header scan"),
                    shm.sizedFrom());
            var small = job(dataset()).shmBudgetBytes(shm.rankNeedBytes() - 1).build();
            try (var smallFeeds = NodeFeeds.open(small)) { // a budget given and too small even for the data: refused, naming it
                var e = assertThrows(ConfigException.class, () -> smallFeeds.shmBudget(lines::add).check());
                assertTrue(e.getMessage().contains("the largest batch of this data set is " + shm.largestBatchBytes() + " bytes"), e.getMessage());
                assertTrue(e.getMessage().contains("Raise --shm-budget to " + shm.rankNeedBytes()), e.getMessage());
            }
        }
    }

    @Test
    void aLengthIndexIsReadBeforeAnyScan() throws Exception {
        var config = job(dataset()).build();
        int[] lengths = new int[RECORDS];
        int[][] patches = new int[RECORDS][];
        var shapes = new ArrayList<SampleShape>();
        for (int i = 0; i < RECORDS; i++) {
            lengths[i] = 100 + i;
            patches[i] = i % 3 == 0 ? new int[] {64, 16} : new int[] {64 + i};
            shapes.add(SampleShape.of(lengths[i], patches[i]));
        }
        writeIndex(config, lengths, patches);
        try (var feeds = NodeFeeds.open(config)) {
            var shm = feeds.shmBudget(line -> {});
            assertTrue(shm.dataSource().startsWith("stoker validate's length index in "), shm.dataSource());
            assertEquals(LargestBatch.padded(config.encodeOptions(), BATCH, ShapeIndex.of(shapes), false).bytes(), shm.largestBatchBytes());
        }
    }

    @Test
    void whereTheShapesCannotBeHadCheaplyTheWorstCaseStays() throws Exception {
        var config = job(dataset()).build();
        var lines = new ArrayList<String>();
        try (var feeds = NodeFeeds.open(config)) {
            var worst = config.shm();
            assertSame(worst, feeds.fromData(worst, RECORDS - 1, lines::add), "more records than a start-up scan reads");
            assertFalse(worst.fromData());
            assertTrue(lines.getLast().contains(RECORDS + " records, more than the " + (RECORDS - 1)) && lines.getLast().contains("worst case"),
                    String.valueOf(lines));
            assertEquals("sized from the configuration's worst case", worst.sizedFrom());
        }
        assertTrue(NodeFeeds.unscannable(List.of(new DataSources.Spec("s3://bucket/ds/train.jsonl")), 10, 100).contains("not a local file"));
        assertEquals(null, NodeFeeds.unscannable(List.of(new DataSources.Spec(tmp.resolve("x.jsonl").toString())), 10, 100));
        var fits = job(dataset()).set(NodeConfig.MAX_SEQ_LEN, 2048).set(NodeConfig.MAX_IMAGES, 2).build();
        try (var feeds = NodeFeeds.open(fits)) { // the worst case fits the default floor: nothing to read
            assertFalse(feeds.shmBudget(lines::add).fromData());
        }
    }

    /** The system-level check: the node starts with no --shm-budget where the worst case refused it, and serves every step. */
    @Test
    void theNodeStartsWithNoBudgetFlagAndServes() throws Exception {
        var config = job(dataset()).build();
        var lines = new ArrayList<String>();
        try (var node = StokerNode.launch(config, lines::add);
             var client = TrainerClient.connect(node.socket(), 0, 1, "sized", TrainerClient.Options.SHARED_MEMORY)) {
            assertTrue(lines.getFirst().contains("sized from the data's largest batch") && lines.getFirst().contains("a header scan of "
                    + RECORDS + " records"), lines.getFirst());
            long limit = node.ledger().store().objectLimitBytes();
            assertTrue(limit < config.shm().largestBatchBytes() / 1000, limit + " bytes");
            for (int s = 0; s < STEPS; s++) {
                try (var r = client.next()) {
                    assertEquals(BATCH, r.batch().sampleIndex().length, "step " + s);
                    assertTrue(r.batch().totalBytes() <= limit, r.batch().totalBytes() + " > " + limit);
                }
            }
        }
    }

    /** An index that understates the data (written for smaller images): the first batch past it fails by name, at once. */
    @Test
    void aBatchPastTheIndexedLargestFailsTheFeedNamingItsSamples() throws Exception {
        var config = job(dataset()).build();
        int[] lengths = new int[RECORDS];
        int[][] patches = new int[RECORDS][];
        for (int i = 0; i < RECORDS; i++) {
            lengths[i] = 30;
            patches[i] = new int[] {4};
        }
        writeIndex(config, lengths, patches);
        var lines = new ArrayList<String>();
        try (var node = StokerNode.launch(config, lines::add);
             var client = TrainerClient.connect(node.socket(), 0, 1, "changed", TrainerClient.Options.SHARED_MEMORY)) {
            assertTrue(lines.getFirst().contains("stoker validate's length index"), lines.getFirst());
            var e = assertThrows(IOException.class, () -> {
                try (var r = client.next()) {
                    throw new AssertionError("a batch within " + node.ledger().store().objectLimitBytes() + " bytes: " + r.batch().totalBytes());
                }
            });
            assertTrue(e.getMessage().contains("more than the " + node.ledger().store().objectLimitBytes() + " bytes shared memory was sized for"),
                    e.getMessage());
            assertTrue(e.getMessage().matches("(?s).*\\(samples s\\d+, .*; sample s\\d+ is its largest.*"), e.getMessage());
        }
    }

    /** Writes validate's length index of {@code config}'s records with these (made-up) shapes. */
    private static void writeIndex(NodeConfig config, int[] lengths, int[][] patches) throws IOException {
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache())) {
            var records = sources.feedSource().records();
            LengthIndex.of(records.name(), HexFormat.of().formatHex(records.digest()), LengthIndex.settings(config.encodeOptions(),
                    LengthIndex.tokenizerId(null)), lengths, patches).write(config.lengthsDir());
        }
    }
}
