package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * LLaMA-Factory's audio layout (a JSON array of records naming their audio relative to the manifest's folder, with
 * {@code <audio>} in a user turn) is refused by the commands, where it once passed {@code validate} and {@code encode}
 * as text-only samples with exit 0 (issue 29, Build item 1): every record an error of stage manifest naming the audio.
 * The audio files are bytes the test writes; they are never read, since the record is refused first.
 */
@Timeout(120)
class MediaRefusalCliTest {
    @TempDir Path tmp;

    /** The records of LLaMA-Factory's data/mllm_audio_demo.json, and the same in its ShareGPT form. */
    static final String AUDIO_DEMO = """
        [
          {
            "messages": [
              {"content": "<audio>What's that sound?", "role": "user"},
              {"content": "It is the sound of glass shattering.", "role": "assistant"}
            ],
            "audios": ["mllm_demo_data/1.wav"]
          },
          {
            "id": "sharegpt",
            "conversations": [
              {"from": "human", "value": "<audio>What can you hear?"},
              {"from": "gpt", "value": "A woman is coughing."}
            ],
            "audios": ["mllm_demo_data/2.wav"]
          },
          {
            "id": "field-only",
            "messages": [
              {"content": "Transcribe the recording.", "role": "user"},
              {"content": "Hello there.", "role": "assistant"}
            ],
            "audios": ["mllm_demo_data/1.wav"]
          }
        ]
        """;

    private Path demo() throws IOException {
        Path ds = Files.createDirectories(tmp.resolve("data/mllm_demo_data"));
        byte[] notReallyAudio = "RIFF\0\0\0\0WAVEfmt ".getBytes(StandardCharsets.US_ASCII);
        Files.write(ds.resolve("1.wav"), notReallyAudio);
        Files.write(ds.resolve("2.wav"), notReallyAudio);
        return Files.writeString(tmp.resolve("data/mllm_audio_demo.json"), AUDIO_DEMO);
    }

    @Test
    void validateCountsEveryAudioRecordAsAnError() throws Exception {
        Path manifest = demo();
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--threads", "1", "--lengths-dir", tmp.resolve("lengths").toString());
        assertEquals(0, r.status(), "exit status as for other bad records; stderr: " + r.err());
        var json = new ObjectMapper().readTree(r.lastStdoutLine());
        assertEquals(3, json.get("samples").asInt(), r.out());
        assertEquals(3, json.get("errors").asInt(), "every record an error: " + r.out());
        assertEquals(0, json.get("filtered").asInt(), "not a filter: " + r.out());
        assertEquals(0, json.get("images").asInt(), r.out());
        for (String expected : new String[] {
                "mllm_audio_demo.json[0]", "messages[0].content: <audio> placeholder found; audio is not supported by the Qwen-VL processors",
                "sharegpt", "conversations[0].value: <audio> placeholder found; audio is not supported by the Qwen-VL processors",
                "field-only", "field 'audios': audio is not supported by the Qwen-VL processors"})
            assertTrue(r.out().contains(expected), "names '" + expected + "': " + r.out());
    }

    @Test
    void encodeExitsTwoWithOneLineNamingTheAudio() throws Exception {
        Path manifest = demo();
        var records = new ObjectMapper().readTree(manifest.toFile());
        for (int i = 0; i < records.size(); i++) {
            Path sample = Files.writeString(manifest.resolveSibling("sample" + i + ".json"), records.get(i).toString());
            var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--sample", sample.toString(), "--out", tmp.resolve("out" + i).toString());
            assertEquals(2, r.status(), "exit status; stderr: " + r.err() + " stdout: " + r.out());
            String err = r.err().strip();
            assertEquals(1, err.lines().count(), "one line on stderr: " + err);
            assertTrue(err.contains("audio is not supported by the Qwen-VL processors"), err);
            assertTrue(err.contains(i == 0 ? "sample0.json" : records.get(i).get("id").asText()), "names the sample: " + err);
            assertTrue(Files.notExists(tmp.resolve("out" + i)), "nothing written");
        }
    }
}
