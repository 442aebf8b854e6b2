package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A zero-copy video job's store prepares its segments at start for the data's batches, not for batches of single images:
 * a video's frames are bounded by neither {@code --max-pixels} nor {@code --max-images}, so segments sized by the image
 * rule ({@link NodeFeeds#prewarmBytes(NodeConfig)}) hold none of its batches and the store made each segment they took
 * mid-epoch. Here four clips made with the ffmpeg CLI, an image cap of 12,544 pixels (a batch of single images: 0.6 MB),
 * batches of two videos (~10 MB): the data's largest batch is found by the start-up scan, every batch served fits it,
 * and after the steps the store has made no segment beyond those prepared at start.
 */
@Timeout(120)
class VideoPrewarmTest {
    private static final int CLIPS = 4, BATCH = 2, STEPS = CLIPS / BATCH;
    @TempDir Path tmp;

    @Test
    void aVideoJobsSegmentsAreThoseOfItsDataAndNoneIsMadeMidEpoch() throws Exception {
        FfmpegClips.require();
        Path ds = Files.createDirectories(tmp.resolve("videos"));
        var lines = new StringBuilder();
        for (int i = 0; i < CLIPS; i++) { // each clip its own length: the batches differ in size
            FfmpegClips.h264(ds.resolve("c" + i + ".mp4"), "320x240", "10", 1.0 + 0.5 * i);
            lines.append("{\"id\": \"v").append(i).append("\", \"video\": \"c").append(i).append(".mp4\", \"conversations\": [{\"from\": ")
                    .append("\"human\", \"value\": \"<video>\\nWhat moves ").append(i).append("?\"}, {\"from\": \"gpt\", \"value\": ")
                    .append("\"Colours.\"}]}\n");
        }
        Path manifest = Files.writeString(ds.resolve("train.jsonl"), lines);
        var config = NodeConfig.builder().data(manifest.toString()).ranks(1).batch(BATCH).processor(ProcessorPreset.QWEN2_VL)
                .pixels(3136, 12544).set(NodeConfig.MAX_SEQ_LEN, 4096)
                .set(NodeConfig.VIDEO_DECODE, dev.stoker.encode.video.VideoEncoding.Decode.IN_PROCESS)
                .set(NodeConfig.INDEX_CACHE, Files.createDirectories(tmp.resolve("index")).toString())
                .shmDir(Files.createDirectories(tmp.resolve("shm"))).socket(tmp.resolve("node.sock"))
                .threads(1).warmUpMillis(0).steps(STEPS).build();

        long imageRule = NodeFeeds.prewarmBytes(config);
        long data;
        var said = new ArrayList<String>();
        try (var feeds = NodeFeeds.open(config)) {
            data = feeds.videoBatchBytes(config.shm(), said::add);
        }
        assertTrue(data > 4 * imageRule, "the data's largest batch, " + data + " bytes, against the image rule's " + imageRule);
        assertEquals(1, said.size(), String.valueOf(said));
        assertTrue(said.getFirst().startsWith("shared memory: segments prepared for the data's largest batch, " + data + " bytes (a header "
                + "scan of " + CLIPS + " records"), said.getFirst());
        assertEquals(data, NodeFeeds.prewarmBytes(config, data));
        int prepared = NodeFeeds.prewarmSegments(config, data);

        try (var node = StokerNode.launch(config, line -> {});
             var client = TrainerClient.connect(node.socket(), 0, 1, "videos", TrainerClient.Options.SHARED_MEMORY)) {
            long largestServed = 0;
            for (int s = 0; s < STEPS; s++) {
                try (var r = client.next()) {
                    assertEquals(BATCH, r.batch().sampleIndex().length, "step " + s);
                    long bytes = r.batch().totalBytes();
                    assertTrue(bytes <= data, "step " + s + ": " + bytes + " bytes, over the data's largest batch of " + data);
                    largestServed = Math.max(largestServed, bytes);
                }
            }
            assertTrue(largestServed > imageRule, largestServed + " bytes: a batch the image rule's segments could not hold");
            var store = node.ledger().store().metrics();
            assertEquals(prepared, store.segmentsCreated(), "the segments prepared at start, none made mid-epoch: " + store);
        }
    }
}
