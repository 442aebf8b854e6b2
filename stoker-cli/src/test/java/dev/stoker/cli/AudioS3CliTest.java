package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.s3.S3MockExtension;
import dev.stoker.testkit.s3.S3MockServer;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.apache.commons.compress.archivers.tar.TarArchiveOutputStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * A WebDataset shard with audio members on S3 (S3Mock on loopback, issue 32): {@code validate} keeps its records and
 * {@code encode --data s3://… --record N} writes the tensors the same sample gives with local files, byte for byte.
 * The CLI takes S3 credentials from the SDK's default chain: here the {@code aws.*} system properties, set for the
 * calls and restored after.
 */
@ExtendWith(S3MockExtension.class)
@Timeout(300)
class AudioS3CliTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String BUCKET = "audio-cli-test";
    private static final List<String> TENSORS = List.of("input_ids.npy", "labels.npy", "position_ids.npy", "input_features.npy",
            "feature_attention_mask.npy");
    private static final String RECORD = """
            {"messages": [{"content": "<audio><audio>Which is longer?", "role": "user"}, {"content": "The first.", "role": "assistant"}]}""";

    @TempDir Path tmp;

    @Test
    void aShardOnS3ServesItsAudioMembersAsLocalFilesAre(S3MockServer s3) throws Exception {
        FfmpegClips.require();
        Path clips = Files.createDirectories(tmp.resolve("clips"));
        FfmpegClips.make(clips.resolve("1.wav"), "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=2.5", "-ac", "1", "-c:a", "pcm_s16le");
        FfmpegClips.make(clips.resolve("2.flac"), "-f", "lavfi", "-i", "sine=frequency=300:sample_rate=22050:duration=1.5", "-ac", "1", "-c:a", "flac");
        var bytes = new ByteArrayOutputStream();
        try (var tar = new TarArchiveOutputStream(bytes, "UTF-8")) {
            for (String key : List.of("k0", "k1")) {
                put(tar, key + ".json", JSON.readTree(RECORD).toString().getBytes(StandardCharsets.UTF_8));
                put(tar, key + ".0.wav", Files.readAllBytes(clips.resolve("1.wav")));
                put(tar, key + ".1.flac", Files.readAllBytes(clips.resolve("2.flac")));
            }
        }
        s3.createBucket(BUCKET);
        s3.putObject(BUCKET, "shards/audio-000.tar", bytes.toByteArray());
        Path sample = Files.writeString(tmp.resolve("sample.json"),
                JSON.readTree(RECORD.replace("}]}", "}], \"audios\": [\"clips/1.wav\", \"clips/2.flac\"]}")).toString());
        var byFile = CliRunner.run("encode", "--processor", "qwen2.5-omni", "--sample", sample.toString(), "--out", tmp.resolve("file").toString());
        assertEquals(0, byFile.status(), byFile.err());

        String uri = "s3://" + BUCKET + "/shards/audio-000.tar";
        var s3Args = List.of("--s3-endpoint", s3.endpoint().toString(), "--s3-path-style");
        String key = System.getProperty("aws.accessKeyId"), secret = System.getProperty("aws.secretAccessKey");
        System.setProperty("aws.accessKeyId", "test-key");
        System.setProperty("aws.secretAccessKey", "test-secret");
        try {
            var validate = new ArrayList<>(List.of("validate", "--data", uri, "--processor", "qwen2.5-omni", "--threads", "1",
                    "--lengths-dir", tmp.resolve("lengths").toString()));
            validate.addAll(s3Args);
            var v = CliRunner.run(validate.toArray(String[]::new));
            assertEquals(0, v.status(), v.err());
            var summary = JSON.readTree(v.lastStdoutLine());
            assertEquals(2, summary.get("samples").asInt());
            assertEquals(0, summary.get("errors").asInt(), v.out());
            assertEquals(4, summary.get("audios").asInt());

            var encode = new ArrayList<>(List.of("encode", "--processor", "qwen2.5-omni", "--data", uri, "--record", "1",
                    "--out", tmp.resolve("s3").toString()));
            encode.addAll(s3Args);
            var e = CliRunner.run(encode.toArray(String[]::new));
            assertEquals(0, e.status(), e.err());
        } finally {
            restore("aws.accessKeyId", key);
            restore("aws.secretAccessKey", secret);
        }
        for (String t : TENSORS)
            assertArrayEquals(Files.readAllBytes(tmp.resolve("file").resolve(t)), Files.readAllBytes(tmp.resolve("s3").resolve(t)), t);
    }

    private static void restore(String name, String value) {
        if (value == null) System.clearProperty(name);
        else System.setProperty(name, value);
    }

    private static void put(TarArchiveOutputStream tar, String name, byte[] b) throws java.io.IOException {
        var e = new TarArchiveEntry(name);
        e.setSize(b.length);
        tar.putArchiveEntry(e);
        tar.write(b);
        tar.closeArchiveEntry();
    }
}
