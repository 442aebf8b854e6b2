package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.node.NodeConfig;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The audio entries of the cache beyond {@link AudioCacheTest}'s valid-pad files (issue 32, item 4; docs/cache.md):
 * {@code --audio-pad hf} clips (the padding made on read from the same entry as the valid mode's), a video's audio track
 * ({@code use_audio_in_video}, keyed by all the video's bytes), and Qwen3-Omni clips, whose features depend on the sample's
 * longest clip (a clip alone, beside a much longer one, and beside one two frames longer), with Qwen3-Omni's float
 * positions in the token entry. For each: a serve without the cache, one with a cold cache, a restart over the same folder
 * and one after every entry was damaged (a byte flipped, or the file torn at half its length) give the same batches bit for
 * bit (every tensor's name, shape and bytes); the restart misses nothing, writes nothing and decodes no clip; the damaged
 * entries are counted corrupt and written again. The audio metrics count the clips of the samples served, decoded or not:
 * the restart's equal the uncached run's.
 */
@Tag("slow")
@Timeout(300)
class AudioCacheKindsTest {
    /** Qwen2.5-Omni under --audio-pad hf: a video's track, a clip alone and two clips. */
    static final String OMNI25 = """
        [
          {"id": "track", "messages": [{"role": "user", "content": [{"type": "video", "video": "clips/4.mp4", "use_audio_in_video": true},
                                                                   {"type": "text", "text": "What happens?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "A test pattern and a tone."}]}]},
          {"messages": [{"content": "<audio>What is said?", "role": "user"}, {"content": "A tone.", "role": "assistant"}],
           "audios": ["clips/1.wav"]},
          {"id": "two-clips", "messages": [{"content": "<audio><audio>Which is longer?", "role": "user"},
                                           {"content": "The first.", "role": "assistant"}],
           "audios": ["clips/1.wav", "clips/3.flac"]}
        ]
        """;
    /**
     * Qwen3-Omni, audio only: 3.flac (1.5 s) alone, beside 1.wav (2.5 s: far shorter than the longest, the "padded" form) and
     * beside 5.wav (1.52 s: two frames shorter, keyed by the longest's length). No MP3: the start-up scan (validate's
     * code, which never uses the cache) decodes an MP3 to measure it, at every start.
     */
    static final String OMNI3 = """
        [
          {"id": "typed", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "clips/3.flac"}, {"type": "text", "text": "And this?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "A shorter tone."}]}]},
          {"id": "two-clips", "messages": [{"content": "<audio><audio>Which is longer?", "role": "user"},
                                           {"content": "The first.", "role": "assistant"}],
           "audios": ["clips/1.wav", "clips/3.flac"]},
          {"id": "near", "messages": [{"content": "<audio><audio>Which is longer?", "role": "user"},
                                      {"content": "The second, by a hair.", "role": "assistant"}],
           "audios": ["clips/3.flac", "clips/5.wav"]}
        ]
        """;
    @TempDir static Path tmp;

    @BeforeAll
    static void data() throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("data/clips"));
        AudioServeTest.makeClips(dir); // 1.wav, 2.mp3, 3.flac, 4.mp4 (H.264 + AAC)
        FfmpegClips.make(dir.resolve("5.wav"), "-f", "lavfi", "-i", "sine=frequency=350:sample_rate=16000:duration=1.52", "-ac", "1",
                "-c:a", "pcm_s16le");
        Files.writeString(tmp.resolve("data/omni25.json"), OMNI25);
        Files.writeString(tmp.resolve("data/omni3.json"), OMNI3);
    }

    private record Job(String manifest, String family, String pad, int records, Path cache) {}

    private static NodeConfig config(Job job, String name, boolean cache) throws Exception {
        return NodeConfig.builder().data(tmp.resolve("data").resolve(job.manifest()).toString()).set("processor", job.family())
                .set("audio-pad", job.pad()).ranks(1).batch(job.records()).steps(1).pixels(3136, 50176)
                .socket(tmp.resolve(name + ".sock")).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .set(NodeConfig.MAX_SEQ_LEN, 1024).set(NodeConfig.PREFETCH_BATCHES, 1).shmBudgetBytes(512L << 20).threads(2)
                .warmUpMillis(0).mode(FeedMode.ZERO_COPY).set(NodeConfig.JOB, name).set(NodeConfig.CACHE, cache)
                .set(NodeConfig.CACHE_DIR, job.cache()).set(NodeConfig.METRICS_FILE, tmp.resolve(name + ".json")).build();
    }

    /** The one batch (one epoch) of a serve: its digest (every tensor's name, shape and bytes, in order). */
    private static List<String> serve(Job job, String name, boolean cache) throws Exception {
        var config = config(job, name, cache);
        assertNull(config.audioFeedRefusal());
        assertEquals(cache, config.cacheOn());
        var out = new ArrayList<String>();
        try (var node = StokerNode.launch(config); var c = TrainerClient.connect(node.socket(), 0, 1, name, TrainerClient.Options.SHARED_MEMORY)) {
            for (int i = 0; i < 1; i++)
                try (var got = c.next()) {
                    assertEquals(job.records(), got.batch().meta().batchSize(), name + ": every sample served");
                    out.add(AudioServeTest.digest(got.batch()));
                }
        }
        return out;
    }

    private static com.fasterxml.jackson.databind.JsonNode metrics(String name) throws Exception {
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(tmp.resolve(name + ".json").toFile());
    }

    private static List<Path> entries(Path cache) throws Exception {
        try (var walk = Files.walk(cache)) {
            return walk.filter(p -> p.toString().endsWith(".stc")).sorted().toList();
        }
    }

    /**
     * Plain, cold, warm and damaged serves of {@code job}: equal batches, the restart all hits and no decode, the damaged
     * entries found and rewritten. Returns the plain run's batches.
     */
    private static List<String> holdsBitForBit(Job job, int clipsPerEpoch, double secondsPerEpoch, long bytesPerClip, int entries)
            throws Exception {
        String n = job.manifest().replace(".json", "");
        var plain = serve(job, n + "-plain", false);
        var cold = serve(job, n + "-cold", true);
        assertEquals(plain, cold, n + ": a cold cache changes no byte of any batch");
        var written = entries(job.cache());
        assertEquals(entries, written.size(), n + ": the entries written " + written);

        var warm = serve(job, n + "-warm", true);
        assertEquals(plain, warm, n + ": a warm cache changes no byte of any batch");
        var warmCache = metrics(n + "-warm").get("cache");
        assertEquals(0, warmCache.get("misses").asLong(), n + ": the restart misses nothing: " + warmCache);
        assertEquals(0, warmCache.get("written").asLong(), n + ": " + warmCache);
        assertTrue(warmCache.get("hits").asLong() >= clipsPerEpoch, n + ": each clip's entry hit: " + warmCache);
        // the restart's own stage figures (not the JVM's decode count: an earlier run's feed may still be encoding ahead)
        var stages = metrics(n + "-warm").path("stages");
        assertEquals(0, stages.path("audio_decode").path("count").asLong(), n + ": the restart decodes no clip: " + stages);
        assertTrue(metrics(n + "-cold").path("stages").path("audio_decode").path("count").asLong() >= 1, n + ": the cold run decodes");
        // the audio metrics count the clips of the samples encoded, decoded or read from the cache (so a restart's are there
        // too); counted as samples are encoded, a run that encoded further ahead before it closed counts more
        for (String run : List.of("-plain", "-warm")) {
            var audio = metrics(n + run).get("pipeline").get("audio");
            assertTrue(audio != null && audio.get("clips").asLong() >= clipsPerEpoch, n + run + ": the epoch's clips: " + audio);
            assertTrue(audio.get("seconds").asDouble() >= secondsPerEpoch - 1e-9, n + run + ": " + audio);
            if (bytesPerClip > 0) assertEquals(bytesPerClip * audio.get("clips").asLong(), audio.get("featureBytes").asLong(), n + run + ": " + audio);
        }

        // every entry damaged: even ones a byte flipped in the payload, odd ones torn at half their length
        for (int i = 0; i < written.size(); i++) {
            Path e = written.get(i);
            byte[] b = Files.readAllBytes(e);
            if (i % 2 == 0) {
                b[b.length - 1] ^= 0x5a;
                Files.write(e, b);
            } else {
                Files.write(e, java.util.Arrays.copyOf(b, b.length / 2));
            }
        }
        var damaged = serve(job, n + "-damaged", true);
        assertEquals(plain, damaged, n + ": no damaged entry is served");
        var damagedCache = metrics(n + "-damaged").get("cache");
        assertTrue(damagedCache.get("corrupt").asLong() >= written.size() && damagedCache.get("written").asLong() >= written.size(),
                n + ": each damaged entry found, computed again and rewritten: " + damagedCache);
        return plain;
    }

    @Test
    void hfPaddedClipsAndAVideosTrackAreCachedAndShareTheValidModesEntries() throws Exception {
        var hf = new Job("omni25.json", "qwen2.5-omni", "hf", 3, tmp.resolve("cache-omni25"));
        // a track of 2 s, 2.5 s and 2.5 + 1.5 s of clips; every hf clip 30,000 frames of 128 float32 and its int32 mask
        // entries: three clips' features (the track, 1.wav, 3.flac), the video's frames, three samples' tokens
        holdsBitForBit(hf, 4, 8.5, 30_000L * 128 * 4 + 30_000L * 4, 3 + 1 + 3);
        // the same data under --audio-pad valid over the hf runs' cache: every entry there already (one entry serves both modes)
        var valid = new Job("omni25.json", "qwen2.5-omni", "valid", 3, hf.cache());
        var plain = serve(valid, "omni25-valid-plain", false);
        assertEquals(plain, serve(valid, "omni25-valid-warm", true), "valid-mode batches from the hf runs' entries");
        var cache = metrics("omni25-valid-warm").get("cache");
        assertEquals(0, cache.get("misses").asLong(), "the valid mode finds the hf mode's entries: " + cache);
    }

    @Test
    void qwen3OmniClipsKeyedByWhatTheirFeaturesDependOn() throws Exception {
        // entries: three clips' lengths; five features — 3.flac alone (to=24000), beside 1.wav (padded), beside 5.wav
        // (to=24320), 1.wav and 5.wav each the longest of its sample (to=40000, to=24320); three samples' tokens with their
        // float positions
        holdsBitForBit(new Job("omni3.json", "qwen3-omni", "valid", 3, tmp.resolve("cache-omni3")), 5, 1.5 + 2.5 + 1.5 + 1.5 + 1.52, 0,
                3 + 5 + 3);
    }
}
