package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.audio.OmniEncoder;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cache of preprocessed samples under {@code --processor qwen2.5-omni} (issue 32, item 4): each clip's log-mel
 * features are kept by the SHA-256 of its bytes, each sample's tokens by its messages and media sizes. A serve without the cache, one with a cold cache and a restart over the
 * same folder give the same batches bit for bit (every tensor's name, shape and bytes); the cold one decodes each clip
 * (counted where clips are decoded, {@link OmniEncoder#clipsDecodedInJvm}); the restart misses no entry and writes none, so
 * it decodes no clip (a clip is decoded only on a miss); and the features of an entry whose bytes were damaged are not
 * served (the entry fails its CRC, is counted corrupt, and the clip is decoded and written again).
 */
@Tag("slow")
@Timeout(300)
class AudioCacheTest {
    @TempDir static Path tmp;

    private static NodeConfig config(Path manifest, String name, boolean cache) throws Exception {
        return NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").ranks(1).batch(AudioServeTest.RECORDS)
                .steps(2).pixels(3136, 50176).socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(256L << 20).threads(2)
                .warmUpMillis(0).mode(FeedMode.ZERO_COPY).set(NodeConfig.JOB, name).set(NodeConfig.CACHE, cache)
                .set(NodeConfig.CACHE_DIR, tmp.resolve("cache")).set(NodeConfig.METRICS_FILE, tmp.resolve(name + ".json")).build();
    }

    /** Two batches (two epochs) of a serve: each one's digest (every tensor's name, shape and bytes, in order). */
    private static List<String> serve(Path manifest, String name, boolean cache) throws Exception {
        var config = config(manifest, name, cache);
        assertNull(config.audioFeedRefusal());
        assertEquals(cache, config.cacheOn());
        var out = new ArrayList<String>();
        try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, name, TrainerClient.Options.SHARED_MEMORY)) {
            for (int i = 0; i < 2; i++)
                try (var got = c.next()) {
                    assertEquals(AudioServeTest.RECORDS, got.batch().meta().batchSize(), name + ": every sample served");
                    out.add(AudioServeTest.digest(got.batch()));
                }
        }
        return out;
    }

    /** The {@code cache} object of run {@code name}'s metrics file. */
    private static com.fasterxml.jackson.databind.JsonNode cache(String name) throws Exception {
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(tmp.resolve(name + ".json").toFile()).get("cache");
    }

    @Test
    void aWarmServeDecodesNoClipAndItsBatchesAreTheUncachedOnes() throws Exception {
        Path manifest = AudioServeTest.writeData(tmp);
        var plain = serve(manifest, "plain", false);
        long before = OmniEncoder.clipsDecodedInJvm();
        var cold = serve(manifest, "cold", true);
        long coldDecodes = OmniEncoder.clipsDecodedInJvm() - before;
        assertEquals(plain, cold, "a cold cache changes no byte of any batch");
        // three distinct clips (1.wav, 2.mp3, 3.flac; a clip two samples share may be decoded by both when they run at once)
        assertTrue(coldDecodes >= 3, "the cold run decodes each clip: " + coldDecodes);
        List<Path> entries;
        try (var walk = Files.walk(tmp.resolve("cache"))) {
            entries = walk.filter(p -> p.toString().endsWith(".stc")).toList();
        }
        assertEquals(3 + 1 + AudioServeTest.RECORDS, entries.size(), "an entry per clip, the video's frames and each sample's tokens: "
                + entries);

        var warm = serve(manifest, "warm", true);
        assertEquals(plain, warm, "a warm cache changes no byte of any batch");
        // the restart's cache: every clip (and the video) read, none missed, so no clip decoded (a clip is decoded only on a miss)
        var warmCache = cache("warm");
        assertEquals(0, warmCache.get("misses").asLong(), "the restart decodes no clip: " + warmCache);
        assertEquals(0, warmCache.get("written").asLong(), warmCache.toString());
        assertTrue(warmCache.get("hits").asLong() >= 2 * (6 + 1 + AudioServeTest.RECORDS),
                "six clips, a video and five samples' tokens an epoch, two epochs: " + warmCache);

        // damaged entries are never served: each entry's last byte flipped, every clip is decoded again, the batches unchanged
        for (Path e : entries) {
            byte[] b = Files.readAllBytes(e);
            b[b.length - 1] ^= 0x5a;
            Files.write(e, b);
        }
        var damaged = serve(manifest, "damaged", true);
        assertEquals(plain, damaged, "no damaged entry's features are served");
        var damagedCache = cache("damaged");
        assertTrue(damagedCache.get("corrupt").asLong() >= entries.size() && damagedCache.get("written").asLong() >= entries.size(),
                "each damaged entry found, decoded again and rewritten: " + damagedCache);
    }
}
