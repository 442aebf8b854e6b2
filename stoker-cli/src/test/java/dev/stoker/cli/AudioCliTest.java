package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.AudioPreset;
import dev.stoker.core.Npy;
import dev.stoker.testkit.FfmpegClips;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The audio families end to end through the commands (issue 32): LLaMA-Factory's audio layout and its video+audio layout,
 * with clips the {@code ffmpeg} command makes here (WAV 16 kHz mono, MP3 48 kHz stereo, FLAC 22.05 kHz mono, an H.264 +
 * AAC video), kept by {@code validate} and encoded by {@code encode} under {@code --processor qwen2.5-omni} with no other
 * option; the same data refused under a Qwen-VL processor; what does not serve audio yet refusing it at start (serve itself:
 * {@link AudioServeTest}).
 */
@Timeout(300)
class AudioCliTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** 2.5 s at 16 kHz: 40,000 samples, 250 valid frames under every family's padding. */
    private static final double WAV_SECONDS = 2.5;
    private static final double MP3_SECONDS = 3.0;
    private static final double FLAC_SECONDS = 1.5;

    /** The clips, made once for the class (ffmpeg takes a second or two a clip); each test writes under its own folder. */
    @TempDir static Path shared;
    @TempDir Path tmp;
    private static Path clips;
    private Path manifest;

    /** LLaMA-Factory's layouts (data/mllm_audio_demo.json, mllm_video_audio_demo.json), its ShareGPT form, and an HF typed item. */
    static final String RECORDS = """
        [
          {"messages": [{"content": "<audio>What is said?", "role": "user"}, {"content": "A tone.", "role": "assistant"}],
           "audios": ["clips/1.wav"]},
          {"id": "sharegpt", "conversations": [{"from": "human", "value": "<audio>What can you hear?"}, {"from": "gpt", "value": "A beep."}],
           "audios": ["clips/2.mp3"]},
          {"id": "two-clips", "messages": [{"content": "<audio><audio>Which is longer?", "role": "user"},
                                           {"content": "The first.", "role": "assistant"}],
           "audios": ["clips/1.wav", "clips/3.flac"]},
          {"id": "video-audio", "messages": [{"content": "<video><audio>What is the video describing?", "role": "user"},
                                             {"content": "A test pattern.", "role": "assistant"}],
           "videos": ["clips/4.mp4"], "audios": ["clips/2.mp3"]},
          {"id": "typed", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "clips/3.flac"}, {"type": "text", "text": "And this?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "A shorter tone."}]}]}
        ]
        """;

    @BeforeAll
    static void makeClips() throws Exception {
        FfmpegClips.require();
        Path dir = clips = Files.createDirectories(shared.resolve("clips"));
        FfmpegClips.make(dir.resolve("1.wav"), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=" + WAV_SECONDS,
                "-ac", "1", "-c:a", "pcm_s16le");
        FfmpegClips.make(dir.resolve("2.mp3"), "-f", "lavfi", "-i", "sine=frequency=660:sample_rate=48000:duration=" + MP3_SECONDS,
                "-ac", "2", "-c:a", "libmp3lame", "-b:a", "128k");
        FfmpegClips.make(dir.resolve("3.flac"), "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=22050:duration=" + FLAC_SECONDS,
                "-ac", "1", "-c:a", "flac");
        FfmpegClips.make(dir.resolve("4.mp4"), "-f", "lavfi", "-i", "testsrc2=size=128x96:rate=8:duration=2", "-f", "lavfi", "-i",
                "sine=frequency=500:sample_rate=44100:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-c:a", "aac", "-shortest");
    }

    @BeforeEach
    void manifest() throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("data/clips"));
        try (var files = Files.list(clips)) {
            for (Path f : files.toList()) Files.copy(f, dir.resolve(f.getFileName()));
        }
        manifest = Files.writeString(tmp.resolve("data/mllm_audio_demo.json"), RECORDS);
    }

    @Test
    void validateKeepsEveryRecordUnderQwen25Omni() throws Exception {
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen2.5-omni", "--threads", "1",
                "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, r.status(), "stderr: " + r.err() + " stdout: " + r.out());
        var json = JSON.readTree(r.lastStdoutLine());
        assertEquals(5, json.get("samples").asInt(), r.out());
        assertEquals(0, json.get("errors").asInt(), "every record kept: " + r.out());
        assertEquals(1, json.get("videos").asInt(), r.out());
        assertEquals(6, json.get("audios").asInt(), "clips named: " + r.out());
        assertTrue(Files.list(tmp.resolve("lengths")).anyMatch(f -> f.getFileName().toString().startsWith("lengths-")), "the length index");

        // validate's lengths (clips counted from their headers, MP3s decoded) are the lengths encode builds from the decoded clips
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(json.get("length_index").asText()));
        for (int i = 0; i < 5; i++) assertEquals(encode(i, "qwen2.5-omni").ids().length, index.lengths()[i], "record " + i);
    }

    @Test
    void encodeWritesValidFramesAndTokensByTheFamilysRule() throws Exception {
        double[][] seconds = {{WAV_SECONDS}, {MP3_SECONDS}, {WAV_SECONDS, FLAC_SECONDS}, {MP3_SECONDS}, {FLAC_SECONDS}};
        for (int i = 0; i < seconds.length; i++) {
            var e = encode(i, "qwen2.5-omni");
            assertArrayEquals(new long[] {seconds[i].length, AudioPreset.MEL_BINS, e.frames()}, e.features().shape(), "record " + i);
            assertEquals("<f4", e.features().dtype());
            assertEquals("<i4", e.mask().dtype());
            int[] sums = e.maskSums();
            int pads = 0;
            int longest = 0;
            for (int k = 0; k < sums.length; k++) {
                // 100 valid frames per second, within the resampler's and the frame edge's rounding
                assertTrue(Math.abs(sums[k] - 100 * seconds[i][k]) <= 2, "record " + i + " clip " + k + ": " + sums[k] + " frames");
                pads += AudioPreset.QWEN2_5_OMNI.tokens(sums[k]);
                longest = Math.max(longest, sums[k]);
            }
            assertEquals(longest, e.frames(), "valid mode: the longest clip's frames, no padding past it");
            assertEquals(pads, e.count(AudioPreset.QWEN2_5_OMNI.audioTokenId()), "record " + i + ": <|AUDIO|> count is the stride-4 rule of the mask sums");
            assertArrayEquals(new long[] {3, e.ids().length}, e.positions().shape(), "record " + i);
            assertEquals("<i8", e.positions().dtype());
            assertTrue(Files.exists(e.dir().resolve("labels.npy")) && Files.exists(e.dir().resolve("attention_mask.npy")));
        }
        var wav = encode(0, "qwen2.5-omni");
        assertEquals(250, wav.maskSums()[0], "2.5 s of 16 kHz PCM: exactly 250 frames");
        assertEquals(AudioPreset.qwen2AudioTokens(250), wav.count(AudioPreset.QWEN2_5_OMNI.audioTokenId()));
        var video = encode(3, "qwen2.5-omni");
        assertTrue(Files.exists(video.dir().resolve("pixel_values_videos.npy")) && Files.exists(video.dir().resolve("video_grid_thw.npy")),
                "the video's tensors beside the audio's");
        assertTrue(video.count(151656) > 0, "video pads");
    }

    @Test
    void audioPadHfPadsAsTheProcessorAndTheOtherFamiliesNumberTheirOwnWay() throws Exception {
        var hf = encode(0, "qwen2.5-omni", "--audio-pad", "hf");
        assertArrayEquals(new long[] {1, 128, 30_000}, hf.features().shape(), "Qwen2.5-Omni pads to 300 s");
        assertEquals(250, hf.maskSums()[0]);
        var valid = encode(0, "qwen2.5-omni");
        assertArrayEquals(valid.ids(), hf.ids(), "padding changes no token");
        assertEquals(hf.features().data().length, 1 * 128 * 30_000 * 4);
        // the valid features are the padded call's first frames, bit for bit (the log floor is taken over the padded call in both)
        for (int mel : new int[] {0, 17, 127}) {
            float[] padded = hf.row(0, mel), kept = valid.row(0, mel);
            assertEquals(30_000, padded.length);
            assertArrayEquals(kept, java.util.Arrays.copyOf(padded, 250), "mel bin " + mel);
        }

        var twoPads = encode(2, "qwen2-audio", "--audio-pad", "hf");
        assertArrayEquals(new long[] {2, 128, 3000}, twoPads.features().shape(), "Qwen2-Audio pads each clip to 30 s");
        assertArrayEquals(new long[] {1, twoPads.ids().length}, twoPads.positions().shape(), "Qwen2-Audio: 1-D positions");

        var q3 = encode(0, "qwen3-omni");
        assertEquals("<f4", q3.positions().dtype(), "Qwen3-Omni's positions are float32");
        assertArrayEquals(new long[] {3, q3.ids().length}, q3.positions().shape());
        assertEquals(250, q3.maskSums()[0], "a clip alone, not padded: floor(40000/160)");
        assertEquals(AudioPreset.QWEN3_OMNI.tokens(250), q3.count(AudioPreset.QWEN3_OMNI.audioTokenId()));
        var q3hf = encode(2, "qwen3-omni", "--audio-pad", "hf");
        assertArrayEquals(new long[] {2, 128, 250}, q3hf.features().shape(), "Qwen3-Omni pads to the longest clip of the sample");
    }

    @Test
    void aQwenVlProcessorStillRefusesEveryAudioRecord() throws Exception {
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen2.5-vl", "--threads", "1",
                "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, r.status(), r.err());
        var json = JSON.readTree(r.lastStdoutLine());
        assertEquals(5, json.get("errors").asInt(), "every record an error: " + r.out());
        assertTrue(r.out().contains("audio is not supported by the Qwen-VL processors"), r.out());
        Path sample = Files.writeString(tmp.resolve("data/sample0.json"), JSON.readTree(RECORDS).get(0).toString());
        var e = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", sample.toString(), "--out", tmp.resolve("vl").toString());
        assertEquals(2, e.status(), e.err());
        assertTrue(e.err().strip().lines().count() == 1 && e.err().contains("audio is not supported by the Qwen-VL processors")
                && e.err().contains("sample0.json"), e.err());
        assertTrue(Files.notExists(tmp.resolve("vl")));
    }

    @Test
    void unknownProcessorsListEveryNameAndServeRefusesAnAudioFamily() {
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen9-omni");
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("qwen2-vl, qwen2.5-vl, qwen3-vl, qwen2-audio, qwen2.5-omni, qwen3-omni"), r.err());
        // serve feeds every family's padded batches and packs, on one node and in a cluster (AudioServeTest,
        // AudioFamiliesServeTest, AudioPackTest, AudioFamiliesPackTest): plan prints a qwen3-omni job's packs, as serve feeds them
        var plan = CliRunner.run("plan", "--data", manifest.toString(), "--processor", "qwen3-omni", "--ranks", "1", "--pack-tokens", "4096",
                "--steps", "1");
        assertEquals(0, plan.status(), plan.err());
        assertTrue(plan.out().contains("\"segment\""), plan.out());
        var bench = CliRunner.run("bench", "ladder", "--data", manifest.toString(), "--processor", "qwen2.5-omni");
        assertEquals(2, bench.status(), bench.err());
        assertTrue(bench.err().contains("does not serve audio yet"), bench.err());
        var pad = CliRunner.run("validate", "--data", manifest.toString(), "--audio-pad", "hf");
        assertEquals(2, pad.status(), pad.err());
        assertTrue(pad.err().contains("need an audio family's --processor"), pad.err());
    }

    @Test
    void aVideoAskedForItsAudioWithoutATrackIsThatSamplesError() throws Exception {
        Path dir = tmp.resolve("data/clips");
        FfmpegClips.h264(dir.resolve("silent.mp4"), "128x96", "8", 2);
        String rec = """
            [{"id": "silent", "messages": [{"role": "user", "content": [{"type": "video", "video": "clips/silent.mp4", "use_audio_in_video": true},
                                                                   {"type": "text", "text": "What is heard?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "Nothing."}]}]},
             {"id": "sound", "messages": [{"role": "user", "content": [{"type": "video", "video": "clips/4.mp4", "use_audio_in_video": true},
                                                                   {"type": "text", "text": "What is heard?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]}]}]
            """;
        Path m = Files.writeString(tmp.resolve("data/aiv.json"), rec);
        var r = CliRunner.run("validate", "--data", m.toString(), "--processor", "qwen2.5-omni", "--threads", "1",
                "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, r.status(), r.err());
        assertEquals(1, JSON.readTree(r.lastStdoutLine()).get("errors").asInt(), r.out());
        assertTrue(r.out().contains("silent.mp4 is used with use_audio_in_video but"), r.out());
        Path sample = Files.writeString(tmp.resolve("data/sound.json"), JSON.readTree(rec).get(1).toString());
        Path out = tmp.resolve("aiv");
        var e = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", out.toString());
        assertEquals(0, e.status(), e.err());
        var enc = Encoded.read(out);
        assertEquals(1, enc.features().shape()[0], "the video's track is the sample's one clip");
        // AAC codes 1024-sample frames: the track is 2 s rounded up to a whole frame, plus what the encoder's priming leaves
        // (at 44.1 kHz, up to 2048 samples: 5 mel frames)
        assertTrue(enc.maskSums()[0] >= 200 && enc.maskSums()[0] <= 205, "2 s track: " + enc.maskSums()[0]);
        assertEquals(AudioPreset.QWEN2_5_OMNI.tokens(enc.maskSums()[0]), enc.count(AudioPreset.QWEN2_5_OMNI.audioTokenId()),
                "the track's tokens, interleaved with the video's");

        // the flag: a video whose item does not say uses its track; the same tensors as the item's key gives
        Path one = Files.writeString(tmp.resolve("data/plain.json"), """
            {"id": "sound", "messages": [{"role": "user", "content": [{"type": "video", "video": "clips/4.mp4"},
                                                                  {"type": "text", "text": "What is heard?"}]},
                                      {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]}]}
            """);
        Path flagged = tmp.resolve("flagged");
        var f = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--use-audio-in-video", "--sample", one.toString(), "--out", flagged.toString());
        assertEquals(0, f.status(), f.err());
        var byFlag = Encoded.read(flagged);
        assertArrayEquals(enc.ids(), byFlag.ids(), "flag and item key: the same input_ids");
        assertArrayEquals(enc.features().data(), byFlag.features().data(), "and the same features");
        var none = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", one.toString(), "--out", tmp.resolve("noflag").toString());
        assertEquals(0, none.status(), none.err());
        assertTrue(Files.notExists(tmp.resolve("noflag/input_features.npy")) || Encoded.read(tmp.resolve("noflag")).features().shape()[0] == 0,
                "without the flag or the key, no clip");
    }

    /**
     * {@code --truncation truncate}: a limit inside the second clip's run cuts before it, so the sample keeps its first clip
     * whole (its features and mask bit for bit the untruncated encode's first row) and drops the second with its features;
     * {@code validate} under the same limit records the cut length.
     */
    @Test
    void truncationCutsBeforeAClipAndDropsItsFeatures() throws Exception {
        var full = encode(2, "qwen2.5-omni");
        long bos = AudioPreset.QWEN2_5_OMNI.audioStartId();
        int second = -1;
        for (int i = 0, seen = 0; i < full.ids().length; i++) if (full.ids()[i] == bos && ++seen == 2) second = i;
        assertTrue(second > 0, "two clip runs");
        int limit = second + 20;
        var cut = encode(2, "qwen2.5-omni", "--max-seq-len", Integer.toString(limit), "--truncation", "truncate");
        assertArrayEquals(java.util.Arrays.copyOf(full.ids(), second), cut.ids(), "cut before the second clip's run");
        assertArrayEquals(new long[] {1, AudioPreset.MEL_BINS, full.frames()}, cut.features().shape(), "one clip left, the longer one");
        assertArrayEquals(java.util.Arrays.copyOf(full.features().data(), cut.features().data().length), cut.features().data());
        assertArrayEquals(java.util.Arrays.copyOf(full.mask().data(), cut.mask().data().length), cut.mask().data());
        assertEquals(3 * second, cut.positions().elementCount());
        // without truncate the same limit filters the sample
        Path sample = tmp.resolve("data/record2.json");
        var filtered = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", tmp.resolve("f").toString(),
                "--max-seq-len", Integer.toString(limit));
        assertEquals(2, filtered.status(), filtered.err());
        assertTrue(filtered.err().contains("over the limit of " + limit), filtered.err());
        var v = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen2.5-omni", "--threads", "1", "--max-seq-len",
                Integer.toString(limit), "--truncation", "truncate", "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, v.status(), v.err() + v.out());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(JSON.readTree(v.lastStdoutLine()).get("length_index").asText()));
        assertEquals(second, index.lengths()[2]);
    }

    /**
     * A clip longer than the decoder's 600 s bound: Qwen2.5-Omni and Qwen2-Audio keep its first 300 s and 30 s, as their
     * processors truncate, decoding only that far (the features equal those of a 320 s copy of the same clip bit for bit);
     * Qwen3-Omni, whose processor keeps a clip whole, refuses it naming the bound, in encode and in validate alike.
     */
    @Test
    void aClipOverTheBoundKeepsTheProcessorsChunkOrIsRefused() throws Exception {
        String sine = "sine=frequency=440:sample_rate=22050:duration=";
        FfmpegClips.make(tmp.resolve("data/long.flac"), "-f", "lavfi", "-i", sine + "700", "-ac", "1", "-c:a", "flac");
        FfmpegClips.make(tmp.resolve("data/part.flac"), "-f", "lavfi", "-i", sine + "320", "-ac", "1", "-c:a", "flac");
        String record = "{\"messages\": [{\"content\": \"<audio>What is it?\", \"role\": \"user\"}, {\"content\": \"A tone.\", \"role\": \"assistant\"}], "
                + "\"audios\": [\"%s\"]}";
        Path longSample = Files.writeString(tmp.resolve("data/long.json"), String.format(record, "long.flac"));
        Path partSample = Files.writeString(tmp.resolve("data/part.json"), String.format(record, "part.flac"));
        for (String family : new String[] {"qwen2.5-omni", "qwen2-audio"}) {
            var l = CliRunner.run("encode", "--processor", family, "--sample", longSample.toString(), "--out", tmp.resolve("l-" + family).toString());
            assertEquals(0, l.status(), l.err());
            var p = CliRunner.run("encode", "--processor", family, "--sample", partSample.toString(), "--out", tmp.resolve("p-" + family).toString());
            assertEquals(0, p.status(), p.err());
            var a = Encoded.read(tmp.resolve("l-" + family));
            var b = Encoded.read(tmp.resolve("p-" + family));
            int chunk = family.equals("qwen2-audio") ? 3000 : 30000;
            assertArrayEquals(new int[] {chunk}, a.maskSums(), family);
            assertArrayEquals(b.ids(), a.ids(), family);
            assertArrayEquals(b.features().data(), a.features().data(), family);
        }
        var refused = CliRunner.run("encode", "--processor", "qwen3-omni", "--sample", longSample.toString(), "--out", tmp.resolve("q3").toString());
        assertEquals(2, refused.status(), refused.err());
        assertTrue(refused.err().contains("over the limit of 600.0 s") || refused.err().contains("longer than 600.0 s"), refused.err());
        Path manifest = Files.writeString(tmp.resolve("data/long.jsonl"), Files.readString(longSample) + "\n");
        for (String family : new String[] {"qwen2.5-omni", "qwen3-omni"}) {
            var v = CliRunner.run("validate", "--data", manifest.toString(), "--processor", family, "--threads", "1", "--lengths-dir",
                    tmp.resolve("lengths-" + family).toString());
            var json = JSON.readTree(v.lastStdoutLine());
            assertEquals(family.equals("qwen3-omni") ? 1 : 0, json.get("errors").asInt(), family + ": " + v.out());
        }
    }

    private Encoded encode(int record, String processor, String... more) throws IOException {
        Path sample = Files.writeString(tmp.resolve("data/record" + record + ".json"), JSON.readTree(RECORDS).get(record).toString());
        Path out = tmp.resolve("out-" + processor + "-" + record + "-" + more.length);
        var args = new java.util.ArrayList<>(java.util.List.of("encode", "--processor", processor, "--sample", sample.toString(), "--out", out.toString()));
        args.addAll(java.util.List.of(more));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), "record " + record + " " + processor + ": " + r.err());
        return Encoded.read(out);
    }

    /** What encode wrote into one folder. */
    private record Encoded(Path dir, long[] ids, Npy.Array features, Npy.Array mask, Npy.Array positions) {
        static Encoded read(Path dir) throws IOException {
            var ids = Npy.read(dir.resolve("input_ids.npy"));
            long[] v = new long[(int) ids.elementCount()];
            ByteBuffer.wrap(ids.data()).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(v);
            return new Encoded(dir, v, Npy.read(dir.resolve("input_features.npy")), Npy.read(dir.resolve("feature_attention_mask.npy")),
                    Npy.read(dir.resolve("position_ids.npy")));
        }

        int frames() { return (int) features.shape()[2]; }

        int[] maskSums() {
            int n = (int) mask.shape()[0], t = (int) mask.shape()[1];
            var b = ByteBuffer.wrap(mask.data()).order(ByteOrder.LITTLE_ENDIAN);
            int[] sums = new int[n];
            for (int k = 0; k < n; k++) {
                boolean ones = true;
                for (int j = 0; j < t; j++) {
                    int m = b.getInt();
                    if (m == 1 && !ones) throw new AssertionError("clip " + k + ": a valid frame after a padding frame");
                    if (m == 0) ones = false;
                    sums[k] += m;
                }
            }
            return sums;
        }

        long count(long id) { return java.util.Arrays.stream(ids).filter(x -> x == id).count(); }

        /** Clip {@code clip}'s mel bin {@code mel} over its valid frames. */
        float[] row(int clip, int mel) {
            int t = frames();
            var b = ByteBuffer.wrap(features.data()).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
            float[] out = new float[t];
            b.position((clip * 128 + mel) * t);
            b.get(out);
            return out;
        }
    }
}
