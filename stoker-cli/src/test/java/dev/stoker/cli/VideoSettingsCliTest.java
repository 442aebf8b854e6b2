package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.awt.image.BufferedImage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The video settings on the command line (issue 29), where no video needs decoding: {@code --video off} refuses a video
 * sample as media Stoker does not serve (exit 2, one line); {@code bench video} refuses a job without video before it
 * reads any data; a command that encodes no video ({@code preprocess}) does not read a model folder's video processor
 * config, so a field Stoker cannot reproduce there does not stop an image; the feed's commands print the settings.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class VideoSettingsCliTest {
    @TempDir Path dir;

    @Test
    void videoOffRefusesAVideoSampleAsUnservedMedia() throws Exception {
        Path sample = Files.writeString(dir.resolve("v.json"), """
            {"messages": [{"role": "user", "content": "<video>What moves?"}, {"role": "assistant", "content": "A ball."}],
             "videos": ["clip.mp4"]}""");
        var r = CliRunner.run("encode", "--processor", "qwen2-vl", "--video", "off", "--sample", sample.toString(), "--out",
                dir.resolve("out").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().strip().endsWith("<video> placeholder found; video is not supported"), r.err());
        assertEquals(1, r.err().strip().lines().count(), r.err());
        assertFalse(Files.exists(dir.resolve("out")));

        r = CliRunner.run("bench", "video", "--processor", "qwen2-vl", "--video", "off", "--data", dir.resolve("none.jsonl").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("--video off: stoker bench video encodes videos"), r.err());
        r = CliRunner.run("bench", "video", "--processor", "qwen2-vl", "--transformers", "5.10", "--data", dir.resolve("none.jsonl").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("pass --transformers 4.57 or 5.18"), r.err());
    }

    @Test
    void aCommandWithoutVideoSettingsDoesNotReadTheModelsVideoConfig() throws Exception {
        Path model = dev.stoker.testkit.ModelFolders.write(dir.resolve("model"), "qwen3-vl"); // 4.57: video rules known
        Files.writeString(model.resolve("video_preprocessor_config.json"), """
            {"size": {"shortest_edge": 4096, "longest_edge": 1000000}, "do_sample_frames": false}""");
        Path image = dir.resolve("a.png");
        ImageIO.write(new BufferedImage(64, 48, BufferedImage.TYPE_3BYTE_BGR), "png", image.toFile());
        var r = CliRunner.run("preprocess", "--model", model.toString(), "--image", image.toString(), "--out", dir.resolve("p").toString());
        assertEquals(0, r.status(), r.err());
        r = CliRunner.run("validate", "--model", model.toString(), "--data", dir.resolve("none.jsonl").toString(), "--print-config");
        assertEquals(2, r.status(), "a command that takes video reads it: " + r.err());
        assertTrue(r.err().contains("do_sample_frames") && r.err().contains("--video off"), r.err());
        r = CliRunner.run("validate", "--model", model.toString(), "--data", dir.resolve("none.jsonl").toString(), "--video", "off",
                "--video-fps", "1.5", "--print-config");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("\nvideo: \"off\"\n") && r.out().contains("\nvideo-fps: 1.5\n")
                && r.out().contains("\n# video-decode: workers  (default)\n"), r.out());
    }
}
