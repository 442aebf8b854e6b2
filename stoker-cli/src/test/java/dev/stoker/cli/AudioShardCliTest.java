package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.encode.validate.LengthIndex;
import dev.stoker.testkit.FfmpegClips;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Audio carried by the data set itself (issue 32): WebDataset tar shards with {@code key.wav}, {@code key.N.flac},
 * {@code key.mp3} members beside {@code key.json}, and a Parquet file with an {@code audios} column of
 * struct&lt;bytes, path&gt; (the datasets {@code Audio} feature), read by {@code validate} and {@code encode --data … --record N} under an
 * audio family exactly as the same samples given as a JSON Lines manifest naming the clips' files (the same lengths, the
 * same {@code .npy} files byte for byte), and refused record by record under a Qwen-VL processor with its usual words.
 * The clips are made here by the {@code ffmpeg} command.
 */
@Timeout(300)
class AudioShardCliTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final List<String> TENSORS = List.of("input_ids.npy", "labels.npy", "attention_mask.npy", "position_ids.npy",
            "input_features.npy", "feature_attention_mask.npy");

    @TempDir static Path dir;

    /** Each sample: its key, its record as the shard carries it, its members' suffixes and files, and the record naming the files. */
    private record Sample(String key, String carried, List<String> suffixes, List<String> files, String named) {}

    private static final List<Sample> SAMPLES = List.of(
            new Sample("a", """
                    {"messages": [{"content": "<audio>What is said?", "role": "user"}, {"content": "A tone.", "role": "assistant"}]}""",
                    List.of("wav"), List.of("1.wav"), """
                    {"messages": [{"content": "<audio>What is said?", "role": "user"}, {"content": "A tone.", "role": "assistant"}],
                     "audios": ["clips/1.wav"]}"""),
            new Sample("b", """
                    {"messages": [{"content": "<audio><audio>Which is longer?", "role": "user"}, {"content": "The first.", "role": "assistant"}]}""",
                    List.of("0.wav", "1.flac"), List.of("1.wav", "3.flac"), """
                    {"messages": [{"content": "<audio><audio>Which is longer?", "role": "user"}, {"content": "The first.", "role": "assistant"}],
                     "audios": ["clips/1.wav", "clips/3.flac"]}"""),
            new Sample("c", """
                    {"messages": [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "And this?"}]},
                                  {"role": "assistant", "content": [{"type": "text", "text": "A beep."}]}]}""",
                    List.of("mp3"), List.of("2.mp3"), """
                    {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "clips/2.mp3"}, {"type": "text", "text": "And this?"}]},
                                  {"role": "assistant", "content": [{"type": "text", "text": "A beep."}]}]}"""),
            new Sample("d", """
                    {"conversations": [{"from": "human", "value": "<audio>What can you hear?"}, {"from": "gpt", "value": "A beep."}],
                     "audios": ["listed-elsewhere.mp3"]}""",
                    List.of("mp3"), List.of("2.mp3"), """
                    {"conversations": [{"from": "human", "value": "<audio>What can you hear?"}, {"from": "gpt", "value": "A beep."}],
                     "audios": ["clips/2.mp3"]}"""));

    private static Path manifest, shard, parquet;

    /** messages: list<struct<role, content: string>>, audios: list<struct<bytes, path>> (the datasets Audio feature). */
    private static final org.apache.parquet.schema.MessageType AUDIO_ROWS = org.apache.parquet.schema.MessageTypeParser.parseMessageType(
            "message schema { optional binary id (STRING);"
            + " optional group messages (LIST) { repeated group list { optional group element {"
            + "   optional binary role (STRING); optional binary content (STRING); } } }"
            + " optional group audios (LIST) { repeated group list { optional group element { optional binary bytes; optional binary path (STRING); } } } }");

    @BeforeAll
    static void data() throws Exception {
        FfmpegClips.require();
        Path clips = Files.createDirectories(dir.resolve("data/clips"));
        FfmpegClips.make(clips.resolve("1.wav"), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=2.5", "-ac", "1", "-c:a", "pcm_s16le");
        FfmpegClips.make(clips.resolve("2.mp3"), "-f", "lavfi", "-i", "sine=frequency=660:sample_rate=48000:duration=3", "-ac", "2",
                "-c:a", "libmp3lame", "-b:a", "128k");
        FfmpegClips.make(clips.resolve("3.flac"), "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=22050:duration=1.5", "-ac", "1", "-c:a", "flac");
        var lines = new StringBuilder();
        for (var s : SAMPLES) lines.append(JSON.readTree(s.named()).toString()).append('\n');
        manifest = Files.writeString(dir.resolve("data/audio.jsonl"), lines);
        shard = dir.resolve("shards/audio-000.tar");
        Files.createDirectories(shard.getParent());
        try (OutputStream out = Files.newOutputStream(shard); var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            for (var s : SAMPLES) {
                put(tar, s.key() + ".json", JSON.readTree(s.carried()).toString().getBytes(StandardCharsets.UTF_8));
                put(tar, s.key() + ".txt", "a caption, ignored".getBytes(StandardCharsets.UTF_8));
                for (int k = 0; k < s.suffixes().size(); k++) put(tar, s.key() + "." + s.suffixes().get(k), Files.readAllBytes(clips.resolve(s.files().get(k))));
            }
        }
        // samples a and b as Parquet rows carrying their clips' bytes (the paths are the clips' names, not read)
        var rows = new ArrayList<java.util.Map<String, Object>>();
        for (var s : SAMPLES.subList(0, 2)) {
            var messages = new ArrayList<Object>();
            for (var m : JSON.readTree(s.carried()).get("messages"))
                messages.add(dev.stoker.parquet.HfParquet.map("role", m.get("role").asText(), "content", m.get("content").asText()));
            var audios = new ArrayList<Object>();
            for (String f : s.files()) audios.add(dev.stoker.parquet.HfParquet.map("bytes", Files.readAllBytes(clips.resolve(f)), "path", "not-here/" + f));
            rows.add(dev.stoker.parquet.HfParquet.map("id", s.key(), "messages", messages, "audios", audios));
        }
        // and a row whose clip is a path only (no bytes): named in its record, fetched relative to the file's folder
        Files.createDirectories(dir.resolve("parquet/clips"));
        Files.copy(clips.resolve("2.mp3"), dir.resolve("parquet/clips/2.mp3"));
        rows.add(dev.stoker.parquet.HfParquet.map("id", "by-path", "messages", List.of(
                dev.stoker.parquet.HfParquet.map("role", "user", "content", "<audio>What can you hear?"),
                dev.stoker.parquet.HfParquet.map("role", "assistant", "content", "A beep.")),
                "audios", List.of(dev.stoker.parquet.HfParquet.map("bytes", null, "path", "clips/2.mp3"))));
        parquet = dev.stoker.parquet.HfParquet.write(Files.createDirectories(dir.resolve("parquet")).resolve("audio.parquet"), AUDIO_ROWS, rows, 10);
    }

    private static void put(TarArchiveOutputStream tar, String name, byte[] bytes) throws IOException {
        var e = new TarArchiveEntry(name);
        e.setSize(bytes.length);
        tar.putArchiveEntry(e);
        tar.write(bytes);
        tar.closeArchiveEntry();
    }

    @Test
    void validateKeepsEveryShardRecordWithTheManifestsLengths() throws Exception {
        var fromShard = validate(shard.toString(), "qwen2.5-omni", "shard");
        assertEquals(4, fromShard.get("samples").asInt());
        assertEquals(0, fromShard.get("errors").asInt(), "every record kept: " + fromShard);
        assertEquals(5, fromShard.get("audios").asInt(), "the clips the members carry");
        var fromManifest = validate(manifest.toString(), "qwen2.5-omni", "manifest");
        assertEquals(0, fromManifest.get("errors").asInt(), fromManifest.toString());
        int[] shardLengths = LengthIndex.read(Path.of(fromShard.get("length_index").asText())).lengths();
        int[] manifestLengths = LengthIndex.read(Path.of(fromManifest.get("length_index").asText())).lengths();
        assertArrayEquals(manifestLengths, shardLengths, "each clip counted from its member's header as from its file's");
        for (int n : shardLengths) assertTrue(n > 40, "audio tokens counted: " + n);
    }

    @Test
    void encodeWritesTheSameTensorsFromAMemberAsFromAFile() throws Exception {
        for (String processor : List.of("qwen2.5-omni", "qwen3-omni")) {
            for (int i = 0; i < SAMPLES.size(); i++) {
                Path sample = Files.writeString(dir.resolve("data/" + processor + "-record" + i + ".json"), JSON.readTree(SAMPLES.get(i).named()).toString());
                Path byFile = dir.resolve("file-" + processor + "-" + i), byMember = dir.resolve("member-" + processor + "-" + i);
                var f = CliRunner.run("encode", "--processor", processor, "--sample", sample.toString(), "--out", byFile.toString());
                assertEquals(0, f.status(), f.err());
                var m = CliRunner.run("encode", "--processor", processor, "--data", shard.toString(), "--record", String.valueOf(i),
                        "--out", byMember.toString());
                assertEquals(0, m.status(), m.err());
                for (String t : TENSORS)
                    assertArrayEquals(Files.readAllBytes(byFile.resolve(t)), Files.readAllBytes(byMember.resolve(t)), processor + " record " + i + ": " + t);
                var features = dev.stoker.core.Npy.read(byMember.resolve("input_features.npy"));
                assertEquals(SAMPLES.get(i).files().size(), features.shape()[0], "one row of features per carried clip");
            }
        }
        // and a manifest through --data gives the same as --sample
        Path viaData = dir.resolve("manifest-data-1");
        var r = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--data", manifest.toString(), "--record", "1", "--out", viaData.toString());
        assertEquals(0, r.status(), r.err());
        for (String t : TENSORS)
            assertArrayEquals(Files.readAllBytes(dir.resolve("file-qwen2.5-omni-1").resolve(t)), Files.readAllBytes(viaData.resolve(t)), t);
    }

    @Test
    void aParquetAudioColumnIsReadAsTheFilesAre() throws Exception {
        var json = validate(parquet.toString(), "qwen2.5-omni", "parquet");
        assertEquals(3, json.get("samples").asInt());
        assertEquals(0, json.get("errors").asInt(), "every row kept: " + json);
        assertEquals(4, json.get("audios").asInt());
        var manifestJson = validate(manifest.toString(), "qwen2.5-omni", "manifest-for-parquet");
        int[] fromManifest = LengthIndex.read(Path.of(manifestJson.get("length_index").asText())).lengths();
        int[] fromRows = LengthIndex.read(Path.of(json.get("length_index").asText())).lengths();
        assertArrayEquals(java.util.Arrays.copyOf(fromManifest, 2), java.util.Arrays.copyOf(fromRows, 2));
        String byPath = """
                {"messages": [{"content": "<audio>What can you hear?", "role": "user"}, {"content": "A beep.", "role": "assistant"}],
                 "audios": ["clips/2.mp3"]}""";
        for (int i = 0; i < 3; i++) {
            Path sample = Files.writeString(dir.resolve("data/pq-record" + i + ".json"), JSON.readTree(i < 2 ? SAMPLES.get(i).named() : byPath).toString());
            Path byFile = dir.resolve("pq-file-" + i), byRow = dir.resolve("pq-row-" + i);
            var f = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", byFile.toString());
            assertEquals(0, f.status(), f.err());
            var r = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--data", parquet.toString(), "--record", String.valueOf(i),
                    "--out", byRow.toString());
            assertEquals(0, r.status(), r.err());
            for (String t : TENSORS)
                assertArrayEquals(Files.readAllBytes(byFile.resolve(t)), Files.readAllBytes(byRow.resolve(t)), "row " + i + ": " + t);
        }
        var vl = validate(parquet.toString(), "qwen2.5-vl", "parquet-vl");
        assertEquals(3, vl.get("errors").asInt(), "every row an error: " + vl);
    }

    @Test
    void aQwenVlProcessorRefusesEveryShardRecordWithAudio() throws Exception {
        var json = validate(shard.toString(), "qwen2.5-vl", "vl");
        assertEquals(4, json.get("errors").asInt(), "every record an error: " + json);
        var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--data", shard.toString(), "--record", "1", "--out", dir.resolve("vl").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().strip().lines().count() == 1 && r.err().contains("audio is not supported by the Qwen-VL processors: "
                + "the record's source carries audio b.0.wav and 1 more"), r.err());
        assertTrue(Files.notExists(dir.resolve("vl")));
    }

    /** A member that is no audio, or a stray one, is its sample's error naming it; the good sample beside it is kept. */
    @Test
    void aBrokenAudioMemberIsItsSamplesErrorNamingIt() throws Exception {
        Path bad = dir.resolve("shards/bad-000.tar");
        try (OutputStream out = Files.newOutputStream(bad); var tar = new TarArchiveOutputStream(out, "UTF-8")) {
            put(tar, "noise.json", JSON.readTree(SAMPLES.getFirst().carried()).toString().getBytes(StandardCharsets.UTF_8));
            put(tar, "noise.wav", "RIFF, but not a wave file at all".getBytes(StandardCharsets.US_ASCII));
            put(tar, "stray.json", JSON.readTree(SAMPLES.getFirst().carried()).toString().getBytes(StandardCharsets.UTF_8));
            put(tar, "stray.left.wav", Files.readAllBytes(dir.resolve("data/clips/1.wav")));
            put(tar, "good.json", JSON.readTree(SAMPLES.getFirst().carried()).toString().getBytes(StandardCharsets.UTF_8));
            put(tar, "good.wav", Files.readAllBytes(dir.resolve("data/clips/1.wav")));
        }
        var r = CliRunner.run("validate", "--data", bad.toString(), "--processor", "qwen2.5-omni", "--threads", "1",
                "--lengths-dir", dir.resolve("lengths-bad").toString());
        assertEquals(0, r.status(), r.err());
        var json = JSON.readTree(r.lastStdoutLine());
        assertEquals(3, json.get("samples").asInt());
        assertEquals(2, json.get("errors").asInt(), r.out());
        assertTrue(r.out().contains("bad-000.tar:noise") && r.out().contains("noise.wav"), r.out());
        assertTrue(r.out().contains("stray.left.wav, named neither stray.wav nor stray.N.wav"), r.out());
        var e = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--data", bad.toString(), "--record", "0", "--out", dir.resolve("bad").toString());
        assertEquals(2, e.status(), e.err());
        assertTrue(e.err().contains("noise.wav"), e.err());
    }

    @Test
    void aRecordOutsideTheDataOrNoneIsAClearError() {
        var r = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--data", shard.toString(), "--record", "4", "--out", dir.resolve("none").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("--record 4 is not a record of") && r.err().contains("which has 4"), r.err());
        var both = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--out", dir.resolve("none").toString());
        assertEquals(2, both.status(), both.err());
        assertTrue(both.err().contains("give either --sample FILE.json or --data URI with --record N"), both.err());
    }

    private static com.fasterxml.jackson.databind.JsonNode validate(String data, String processor, String lengths) throws IOException {
        var r = CliRunner.run("validate", "--data", data, "--processor", processor, "--threads", "1",
                "--lengths-dir", dir.resolve("lengths-" + lengths).toString());
        assertEquals(0, r.status(), "stderr: " + r.err() + " stdout: " + r.out());
        if (processor.endsWith("-vl")) assertTrue(r.out().contains("audio is not supported by the Qwen-VL processors"), r.out());
        return JSON.readTree(r.lastStdoutLine());
    }
}
