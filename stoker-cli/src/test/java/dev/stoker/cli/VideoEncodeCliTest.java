package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.stoker.core.Npy;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code stoker encode} on LLaMA-Factory's video layout at the defaults, with clips made here by the ffmpeg CLI as
 * its demo's are (H.264 in MP4 at 25 fps tagged BT.709, H.264 in AVI at 359/12 fps), for the three families: exit 0,
 * {@code pixel_values_videos} with Σ t·h·w rows of 3·2·p² floats, as many {@code <|video_pad|>} tokens as
 * Σ t·h·w / 4, the sampled frame indices, Qwen2.5's {@code second_per_grid_ts}. Needs nothing outside the repository
 * but FFmpeg (which {@code ./stoker test} installs; {@code -Dstoker.video.skipWithoutFfmpeg=true} skips instead).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class VideoEncodeCliTest {
    @TempDir static Path dir;
    static final long VIDEO_PAD = 151656;

    @BeforeAll
    static void clips() throws Exception {
        if (!onPath("ffmpeg")) {
            String message = "the ffmpeg command is missing: install the Debian package ffmpeg (./stoker test installs it)";
            if (Boolean.getBoolean("stoker.video.skipWithoutFfmpeg")) Assumptions.abort(message);
            fail(message);
        }
        Path data = Files.createDirectories(dir.resolve("mllm_demo_data"));
        ffmpeg(data.resolve("1.mp4"), "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25:duration=2", "-c:v", "libx264",
                "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-color_primaries", "bt709", "-color_trc", "bt709",
                "-colorspace", "bt709");
        ffmpeg(data.resolve("2.avi"), "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=359/12:duration=1.5", "-c:v",
                "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p");
        Files.writeString(dir.resolve("one.json"), """
            {"messages": [{"content": "<video>Why is this video funny?", "role": "user"},
                          {"content": "Because a baby is reading, and he is so cute!", "role": "assistant"}],
             "videos": ["mllm_demo_data/1.mp4"]}
            """);
        Files.writeString(dir.resolve("two.json"), """
            {"messages": [{"content": "<video>What is she doing?", "role": "user"},
                          {"content": "She is cooking.", "role": "assistant"},
                          {"content": "<video>And now?", "role": "user"},
                          {"content": "Still cooking.", "role": "assistant"}],
             "videos": ["mllm_demo_data/2.avi", "mllm_demo_data/1.mp4"]}
            """);
    }

    private static boolean onPath(String tool) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
            if (Files.isExecutable(Path.of(d, tool))) return true;
        }
        return false;
    }

    private static void ffmpeg(Path out, String... args) throws Exception {
        var cmd = new ArrayList<>(List.of("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"));
        cmd.addAll(List.of(args));
        cmd.add(out.toString());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
        String text = new String(p.getInputStream().readAllBytes());
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) fail("ffmpeg failed: " + text);
    }

    /**
     * LLaMA-Factory's layout as a data set (a JSON array of its records, media relative to the manifest's folder) at the
     * defaults: {@code validate} keeps every record (0 errors, 0 filtered; --video auto sees the videos), and its length
     * index holds each record's encoded length; their audio layout under a Qwen-VL processor is every record an error.
     */
    @org.junit.jupiter.api.Test
    void validateKeepsEveryRecordOfTheVideoLayoutAndRefusesTheAudioOne() throws Exception {
        Path manifest = Files.writeString(dir.resolve("mllm_video_demo.json"), "[" + Files.readString(dir.resolve("one.json")) + ","
                + Files.readString(dir.resolve("two.json")) + "]");
        Path lengths = dir.resolve("lengths");
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--threads", "2", "--lengths-dir", lengths.toString());
        assertEquals(0, r.status(), r.err());
        var json = new com.fasterxml.jackson.databind.ObjectMapper().readTree(r.lastStdoutLine());
        assertEquals(2, json.get("samples").asInt(), r.out());
        assertEquals(0, json.get("errors").asInt(), r.out());
        assertEquals(0, json.get("filtered").asInt(), r.out());
        var index = dev.stoker.encode.validate.LengthIndex.read(Path.of(json.get("length_index").asText()));
        for (int i = 0; i < 2; i++) {
            Path out = dir.resolve("validated-" + i);
            var e = CliRunner.run("encode", "--sample", dir.resolve(i == 0 ? "one.json" : "two.json").toString(), "--out", out.toString());
            assertEquals(0, e.status(), e.err());
            assertEquals(dev.stoker.core.Npy.read(out.resolve("input_ids.npy")).asLongs().length, index.lengths()[i], "record " + i);
            assertTrue(index.videos(i) > 0, "record " + i + "'s videos in the index");
        }
        Path audio = Files.writeString(dir.resolve("mllm_audio_demo.json"), """
            [{"messages": [{"content": "<audio>What's that sound?", "role": "user"},
                           {"content": "It is the sound of glass shattering.", "role": "assistant"}],
              "audios": ["mllm_demo_data/1.mp3"]}]
            """);
        var a = CliRunner.run("validate", "--data", audio.toString(), "--threads", "1", "--lengths-dir", lengths.toString());
        var aj = new com.fasterxml.jackson.databind.ObjectMapper().readTree(a.lastStdoutLine());
        assertEquals(1, aj.get("errors").asInt(), a.out() + a.err());
    }

    @org.junit.jupiter.api.Test
    void aVideoShorterThanItsStartAndAStreamWithoutTimestampsAreTheSamplesErrors() throws Exception {
        Path data = dir.resolve("mllm_demo_data");
        ffmpeg(data.resolve("raw.h264"), "-i", data.resolve("1.mp4").toString(), "-c", "copy", "-bsf:v", "h264_mp4toannexb");
        Files.writeString(dir.resolve("late.json"), """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "mllm_demo_data/1.mp4", "video_start": 5.0},
                                                       {"type": "text", "text": "What happens after 5 s?"}]},
                          {"role": "assistant", "content": "Nothing: it is 2 s long."}]}
            """);
        var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--video-sampler", "qwen-vl-utils", "--sample",
                dir.resolve("late.json").toString(), "--out", dir.resolve("late").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("video mllm_demo_data/1.mp4: Invalid time range"), r.err());
        assertEquals(1, r.err().strip().lines().count(), r.err());
        Files.writeString(dir.resolve("raw.json"), """
            {"messages": [{"role": "user", "content": "<video>Describe it."}, {"role": "assistant", "content": "No."}],
             "videos": ["mllm_demo_data/raw.h264"]}
            """);
        r = CliRunner.run("encode", "--processor", "qwen2-vl", "--sample", dir.resolve("raw.json").toString(), "--out",
                dir.resolve("raw").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("video mllm_demo_data/raw.h264: packet 0 has neither pts nor dts"), r.err());
    }

    /**
     * Containers whose timing is broken (issue 29, Build item 8), made from 1.mp4 by patching its MP4 boxes. Every
     * {@code stts} delta 0 (all 50 frames at one instant; ffprobe's r_frame_rate 1/0): PyAV 18.1 still reports an average
     * rate (the references sample by it) and decodes every frame with pts 0, so the sample is encoded, its frames chosen by
     * their place in the stream, not by the equal timestamps — the same 8 frames of the intact file give the same pixels.
     * {@code mdhd}'s timescale 0 (libavformat: "Invalid mdhd time scale 0, defaulting to 1", 1/1024 fps): that sample's
     * error naming the video and FFmpeg's report (exit 2, one line), under both samplers.
     */
    @org.junit.jupiter.api.Test
    void aContainerWithBrokenTimingIsSampledByPlaceOrRefusedNamingTheCause() throws Exception {
        Path data = dir.resolve("mllm_demo_data");
        byte[] mp4 = Files.readAllBytes(data.resolve("1.mp4"));
        byte[] zero = mp4.clone(), slow = mp4.clone();
        int stts = indexOf(zero, "stts"), entries = java.nio.ByteBuffer.wrap(zero, stts + 8, 4).getInt();
        for (int k = 0; k < entries; k++) java.nio.ByteBuffer.wrap(zero).putInt(stts + 16 + 8 * k, 0); // each entry's delta
        int mdhd = indexOf(slow, "mdhd");
        assertEquals(0, slow[mdhd + 4], "a version 0 mdhd");
        java.nio.ByteBuffer.wrap(slow).putInt(mdhd + 16, 0); // version/flags, creation, modification, then the timescale
        Files.write(data.resolve("zero-fps.mp4"), zero);
        Files.write(data.resolve("slow-fps.mp4"), slow);
        var pixels = new ArrayList<byte[]>();
        for (String clip : List.of("1.mp4", "zero-fps.mp4")) {
            Path sample = Files.writeString(dir.resolve(clip + ".json"), "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                    + "\"video\", \"video\": \"mllm_demo_data/" + clip + "\", \"nframes\": 8}, {\"type\": \"text\", \"text\": \"Hm?\"}]}, "
                    + "{\"role\": \"assistant\", \"content\": \"Hm.\"}]}");
            Path out = dir.resolve("timing-" + clip);
            var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--video-sampler", "qwen-vl-utils", "--sample", sample.toString(),
                    "--out", out.toString());
            assertEquals(0, r.status(), clip + ": " + r.err());
            assertArrayEquals(new long[] {0, 7, 14, 21, 28, 35, 42, 49}, dev.stoker.core.Npy.read(out.resolve("frame_indices.npy")).asLongs(), clip);
            pixels.add(Files.readAllBytes(out.resolve("pixel_values_videos.npy")));
        }
        assertArrayEquals(pixels.get(0), pixels.get(1), "the frames at those places, whatever their timestamps say");
        Path sample = Files.writeString(dir.resolve("slow.json"), "{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hm?\"}, "
                + "{\"role\": \"assistant\", \"content\": \"Hm.\"}], \"videos\": [\"mllm_demo_data/slow-fps.mp4\"]}");
        for (String sampler : List.of("hf", "qwen-vl-utils")) {
            var r = CliRunner.run("encode", "--processor", "qwen2.5-vl", "--video-sampler", sampler, "--sample", sample.toString(),
                    "--out", dir.resolve("slow-" + sampler).toString());
            assertEquals(2, r.status(), sampler + ": " + r.err() + r.out());
            assertTrue(r.err().contains("video mllm_demo_data/slow-fps.mp4: ") && r.err().contains("Invalid mdhd time scale 0"),
                    sampler + ": " + r.err());
            assertEquals(1, r.err().strip().lines().count(), r.err());
        }
    }

    private static int indexOf(byte[] bytes, String box) {
        byte[] b = box.getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        outer:
        for (int i = 0; i + b.length <= bytes.length; i++) {
            for (int k = 0; k < b.length; k++) if (bytes[i + k] != b[k]) continue outer;
            return i;
        }
        throw new AssertionError("no " + box + " box");
    }

    @org.junit.jupiter.api.Test
    void aOneFrameVideoIsRefusedAsEachReferenceRefusesIt() throws Exception {
        Path data = dir.resolve("mllm_demo_data");
        ffmpeg(data.resolve("one.mp4"), "-i", data.resolve("1.mp4").toString(), "-frames:v", "1", "-c", "copy");
        Files.writeString(dir.resolve("oneframe.json"), """
            {"messages": [{"role": "user", "content": "<video>What moves?"}, {"role": "assistant", "content": "Nothing."}],
             "videos": ["mllm_demo_data/one.mp4"]}
            """);
        // transformers' samplers and qwen-vl-utils raise on a 1-frame video; Stoker refuses it with their causes
        for (var c : List.of(List.of("qwen2-vl", "hf", "Video can't be sampled"),
                List.of("qwen3-vl", "hf", "must be larger than temporal_factor"),
                List.of("qwen2.5-vl", "qwen-vl-utils", "nframes should in interval"))) {
            var r = CliRunner.run("encode", "--processor", c.get(0), "--video-sampler", c.get(1), "--sample",
                    dir.resolve("oneframe.json").toString(), "--out", dir.resolve("oneframe-" + c.get(0)).toString());
            assertEquals(2, r.status(), c + ": " + r.err());
            assertTrue(r.err().contains("video mllm_demo_data/one.mp4: ") && r.err().contains(c.get(2)), c + ": " + r.err());
        }
    }

    @org.junit.jupiter.api.Test
    void aModelFoldersVideoProcessorConfigSetsTheDefaultsAndWhatCannotBeReproducedIsRefused() throws Exception {
        Path model = dev.stoker.testkit.ModelFolders.write(dir.resolve("model"), "qwen2-vl");
        Files.writeString(model.resolve("video_preprocessor_config.json"), """
            {"video_processor_type": "Qwen2VLVideoProcessor", "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
             "size": {"shortest_edge": 3136, "longest_edge": 12544}, "do_sample_frames": true, "fps": 1.0}
            """);
        Path out = dir.resolve("model-out");
        // the folder was saved by transformers 4.41, whose video rules Stoker does not know: the trainer's release is asked for
        var r = CliRunner.run("encode", "--model", model.toString(), "--sample", dir.resolve("one.json").toString(),
                "--out", out.toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("pass --transformers 4.57 or 5.18"), r.err());
        r = CliRunner.run("encode", "--model", model.toString(), "--transformers", "5.18", "--sample",
                dir.resolve("one.json").toString(), "--out", out.toString());
        assertEquals(0, r.status(), r.err());
        long[] g = Npy.read(out.resolve("video_grid_thw.npy")).asLongs();
        assertTrue(g[1] * g[2] * 14 * 14 <= 12544, "the folder's longest_edge bounds each frame: " + java.util.Arrays.toString(g));
        assertEquals(2, g[0], "fps 1.0 from the folder: 2 frames of the 2 s clip would be 1 group, the minimum 4 frames 2");
        // a flag overrides the folder
        r = CliRunner.run("encode", "--model", model.toString(), "--transformers", "5.18", "--video-max-pixels", "50176", "--sample",
                dir.resolve("one.json").toString(), "--out", dir.resolve("model-out2").toString());
        assertEquals(0, r.status(), r.err());
        long[] g2 = Npy.read(dir.resolve("model-out2").resolve("video_grid_thw.npy")).asLongs();
        assertTrue(g2[1] * g2[2] > g[1] * g[2], java.util.Arrays.toString(g2));
        Files.writeString(model.resolve("video_preprocessor_config.json"), """
            {"video_processor_type": "Qwen2VLVideoProcessor", "size": {"shortest_edge": 3136, "longest_edge": 12544},
             "do_sample_frames": false}
            """);
        r = CliRunner.run("encode", "--model", model.toString(), "--transformers", "5.18", "--sample",
                dir.resolve("one.json").toString(), "--out", dir.resolve("model-out3").toString());
        assertEquals(2, r.status(), r.err());
        assertTrue(r.err().contains("do_sample_frames"), r.err());
    }

    @ParameterizedTest
    @ValueSource(strings = {"qwen2-vl", "qwen2.5-vl", "qwen3-vl"})
    void llamaFactoryVideoRecordsEncodeAtTheDefaults(String processor) throws Exception {
        for (String sample : List.of("one.json", "two.json")) {
            Path out = dir.resolve(processor + "-" + sample);
            var r = CliRunner.run("encode", "--processor", processor, "--sample", dir.resolve(sample).toString(), "--out",
                    out.toString());
            assertEquals(0, r.status(), r.err());
            var grid = Npy.read(out.resolve("video_grid_thw.npy"));
            int videos = sample.equals("one.json") ? 1 : 2;
            assertEquals(List.of((long) videos, 3L), List.of(grid.shape()[0], grid.shape()[1]));
            long[] g = grid.asLongs();
            long rows = 0;
            for (int k = 0; k < videos; k++) rows += g[3 * k] * g[3 * k + 1] * g[3 * k + 2];
            var pv = Npy.read(out.resolve("pixel_values_videos.npy"));
            int p = processor.equals("qwen3-vl") ? 16 : 14;
            assertEquals(rows, pv.shape()[0]);
            assertEquals(3L * 2 * p * p, pv.shape()[1]);
            long pads = 0;
            for (long id : Npy.read(out.resolve("input_ids.npy")).asLongs()) if (id == VIDEO_PAD) pads++;
            assertEquals(rows / 4, pads, "one <|video_pad|> per 2x2 merged patch");
            // 2 s at 25 fps and 1.5 s at 359/12 fps, sampled at 2 fps: 4 frames each
            assertEquals(4L * videos, Npy.read(out.resolve("frame_indices.npy")).shape()[0]);
            assertEquals(processor.equals("qwen2.5-vl"), Files.exists(out.resolve("second_per_grid_ts.npy")));
        }
    }
}
