package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.SampleException;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.testkit.ModelFolders;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoKey;
import dev.stoker.video.sample.VideoSampler;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The video settings as node settings (issue 29): each key read, checked and written back through a config file; the
 * encoding they make ({@link NodeConfig#videoEncoding()}, carried by {@link NodeConfig#encodeOptions()}); {@code --video
 * off} and a release whose video rules Stoker does not know both leave none, the latter with the reason a refused video
 * record then gives; a model folder's video processor field Stoker cannot reproduce refused at start, named.
 */
@Timeout(60)
class VideoSettingsTest {
    private static final byte[] VIDEO_RECORD = """
            {"messages": [{"role": "user", "content": "<video>What moves?"}, {"role": "assistant", "content": "A ball."}],
             "videos": ["clip.mp4"]}""".getBytes(StandardCharsets.UTF_8);
    private static final byte[] IMAGE_RECORD = """
            {"messages": [{"role": "user", "content": "<image>What is it?"}, {"role": "assistant", "content": "A cat."}],
             "images": ["cat.jpg"]}""".getBytes(StandardCharsets.UTF_8);

    @TempDir Path tmp;

    @Test
    void theDefaultsAreTheHfSamplerOfQwenVlFinetuneDecodedInWorkers() {
        var config = NodeConfig.builder().build(); // no --data: --video auto is on
        VideoEncoding v = config.videoEncoding();
        assertEquals(VideoEncoding.defaults().withDecode(VideoEncoding.Decode.WORKERS), v);
        assertEquals(v, config.encodeOptions().video(), "the options carry it");
        assertNull(config.videoRefusal());
        assertEquals(VideoEncoding.Decode.WORKERS, config.get(NodeConfig.VIDEO_DECODE));
        assertTrue(config.encodeOptions().sampleParser().acceptsVideo());
    }

    @Test
    void everyKeyIsReadAndReadsBackTheSameFromAConfigFile() throws Exception {
        var config = NodeConfig.builder().data("d.jsonl").set("video", "on").set("video-sampler", "qwen-vl-utils").set("video-fps", "1.5")
                .set("video-min-frames", "8").set("video-max-frames", "64").set("video-min-pixels", "12544")
                .set("video-max-pixels", "3.2e5").set("video-total-pixels", "9000000").set("video-cpu", "AVX512")
                .set("video-decode-timeout", "12.5").set("video-decode", "in-process").set("transformers", "5.18").build();
        VideoEncoding v = config.videoEncoding();
        assertEquals(VideoSampler.QWEN_VL_UTILS, v.sampler());
        assertEquals(Map.of(VideoKey.FPS, 1.5, VideoKey.MIN_FRAMES, 8.0, VideoKey.MAX_FRAMES, 64.0, VideoKey.MIN_PIXELS, 12544.0,
                VideoKey.MAX_PIXELS, 320000.0, VideoKey.TOTAL_PIXELS, 9e6), v.options().values());
        assertEquals(VideoContract.TRANSFORMERS_5_18, v.contract());
        assertEquals(CpuCapability.AVX512, v.cpu());
        assertEquals(12_500_000_000L, v.decodeTimeoutNanos());
        assertEquals(VideoEncoding.Decode.IN_PROCESS, config.get(NodeConfig.VIDEO_DECODE));
        assertEquals(VideoEncoding.Decode.IN_PROCESS, v.decode(), "the feed decodes where the encoding says");

        String yaml = config.toYaml(NodeConfig.keys());
        for (String line : new String[] {"video: \"on\"", "video-sampler: qwen-vl-utils", "video-fps: 1.5", "video-min-frames: 8",
            "video-max-pixels: 320000", "video-total-pixels: 9000000", "video-cpu: avx512", "video-decode-timeout: 12.5",
            "video-decode: in-process"})
            assertTrue(yaml.contains("\n" + line + "\n"), line + " in\n" + yaml);
        var back = NodeConfig.fromYaml(Files.writeString(tmp.resolve("c.yaml"), yaml));
        assertEquals(config, back);
        assertEquals(config.encodeOptions(), back.encodeOptions());
        assertEquals(config, NodeConfig.fromJson(config.toJson()), "as a cluster job carries it");
        // YAML's own booleans read as the switch's words
        var off = NodeConfig.fromYaml(Files.writeString(tmp.resolve("off.yaml"), "data: d.jsonl\nvideo: off\n"));
        assertNull(off.videoEncoding());
        String defaults = NodeConfig.builder().build().toYaml(NodeConfig.keys());
        assertTrue(defaults.contains("\n# video: auto  (default)\n# video-sampler: hf  (default)\n# video-fps: (default: 2; with --model"),
                defaults);
        assertTrue(defaults.contains("\n# video-decode-timeout: 300  (default)\n# video-decode: workers  (default)\n"), defaults);
    }

    @Test
    void aBadValueIsRefusedNamingItsOption() {
        assertEquals("--video-fps: fps is 0, outside 0.001 … 1000", refusal("video-fps", "0"));
        assertEquals("--video-min-frames: min_frames is 2.5, not a whole number", refusal("video-min-frames", "2.5"));
        assertEquals("--video-max-pixels: 'lots' is not a number", refusal("video-max-pixels", "lots"));
        assertEquals(dev.stoker.video.sample.VideoSampler.LLAMAFACTORY,
                NodeConfig.builder().set("video-sampler", "llamafactory").build().get(NodeConfig.VIDEO_SAMPLER), "encoded now: accepted");
        assertTrue(refusal("video-sampler", "decord").startsWith("--video-sampler: unknown video sampler 'decord'"));
        assertTrue(refusal("video-cpu", "sse4").startsWith("--video-cpu: unknown value 'sse4'; expected one of default, avx2, avx512"));
        assertEquals("--video-decode-timeout: must be a positive number, got 0", refusal("video-decode-timeout", "0"));
        assertEquals("--video-decode-timeout: must be at most 86400 seconds, got 1e6", refusal("video-decode-timeout", "1e6"));
        assertTrue(refusal("video-decode", "threads").startsWith("--video-decode: unknown value 'threads'; expected one of workers, in-process"));
        assertTrue(refusal("video", "maybe").startsWith("--video: "));
        // checked together: an option the sampler has no use for
        var e = assertThrows(ConfigException.class, () -> NodeConfig.builder().set("video-total-pixels", "9000000").build());
        assertTrue(e.getMessage().startsWith("--video-total-pixels is a qwen-vl-utils option"), e.getMessage());
        NodeConfig.builder().set("video-total-pixels", "9000000").set("video", "off").build(); // off: the settings do nothing
    }

    private static String refusal(String key, String value) {
        return assertThrows(ConfigException.class, () -> NodeConfig.builder().set(key, value).build()).getMessage();
    }

    @Test
    void videoOffRefusesVideoRecordsAsBefore() {
        var config = NodeConfig.builder().data("d.jsonl").set("video", "off").build();
        assertNull(config.videoEncoding());
        assertNull(config.videoRefusal());
        var options = config.encodeOptions();
        assertNull(options.video());
        assertNull(options.videoRefusal());
        var e = assertThrows(SampleException.class, () -> options.sampleParser().parseLine(VIDEO_RECORD, "s1"));
        assertTrue(e.getMessage().endsWith("<video> placeholder found; video is not supported"), e.getMessage());
        assertEquals(1, options.sampleParser().parseLine(IMAGE_RECORD, "s2").imagePaths().size());
    }

    @Test
    void aReleaseWithoutKnownVideoRulesTakesNoVideoAndTheRefusalSaysWhatToPass() {
        assertEquals(VideoContract.TRANSFORMERS_4_57, NodeConfig.builder().set("transformers", "4.57.6").build().videoEncoding().contract());
        var config = NodeConfig.builder().data("d.jsonl").set("transformers", "5.10").build();
        assertNull(config.videoEncoding());
        assertNull(config.encodeOptions().video());
        String why = config.videoRefusal();
        assertTrue(why.contains("not 5.10") && why.endsWith("pass --transformers 4.57 or 5.18, the release the trainer runs"), why);
        assertEquals(why, config.encodeOptions().videoRefusal(), "the options carry the reason");
        var e = assertThrows(SampleException.class, () -> config.encodeOptions().sampleParser().parseLine(VIDEO_RECORD, "s1"));
        assertTrue(e.getMessage().contains("<video> placeholder found; video is not supported: " + why), e.getMessage());
        assertEquals(1, config.encodeOptions().sampleParser().parseLine(IMAGE_RECORD, "s2").imagePaths().size(), "images keep working");
        // a model folder saved by such a release: the same, and its video processor config is not read
        Path qwen2 = ModelFolders.write(tmp.resolve("qwen2"), "qwen2-vl"); // transformers_version 4.41.2
        var fromModel = NodeConfig.builder().set(NodeConfig.MODEL, qwen2).build();
        assertNull(fromModel.videoEncoding());
        assertTrue(fromModel.videoRefusal().contains("not 4.41"), fromModel.videoRefusal());
    }

    /**
     * With video on, --max-images does not bound a sample's pixels (a video's frames take what the tokens allow:
     * ShmBudget), so a budget sized by it is refused, and the refusal says so and how to size it, or to turn video off.
     */
    @Test
    void withVideoTheSharedMemoryRefusalSaysWhatBoundsABatch() {
        var b = NodeConfig.builder().data("d.jsonl").batch(2).processor(dev.stoker.core.ProcessorPreset.QWEN2_VL).pixels(3136, 50176)
                .set(NodeConfig.MAX_IMAGES, 1).shmBudgetBytes(64L << 20).set(NodeConfig.VIDEO, NodeConfig.VideoMode.ON);
        var e = assertThrows(ConfigException.class, () -> b.build().shm().check());
        assertTrue(e.getMessage().contains("with --video on, --max-images and --max-pixels do not bound a video's frames")
                && e.getMessage().endsWith("or lower --batch or --max-seq-len; a job without video: --video off"), e.getMessage());
        b.set(NodeConfig.VIDEO, NodeConfig.VideoMode.OFF).build().shm().check(); // an image-only job: --max-images bounds it as before
    }

    /**
     * --video auto (the default) reads the data once: an image manifest (no "video" anywhere) makes a job without video —
     * its encoding, fingerprint and shared memory as before video existed, --max-images bounding a batch — and a manifest
     * with a video record (LLaMA-Factory's layout, one line) a job with video; a command without --data has video.
     */
    @Test
    void autoTurnsVideoOnOnlyForDataThatMayHoldIt() throws Exception {
        Path images = Files.writeString(tmp.resolve("images.jsonl"),
                "{\"image\": \"a.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}\n");
        Path videos = Files.writeString(tmp.resolve("videos.jsonl"),
                "{\"videos\": [\"a.mp4\"], \"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}]}\n");
        var imageJob = NodeConfig.builder().data(images.toString()).batch(2).processor(dev.stoker.core.ProcessorPreset.QWEN2_VL)
                .pixels(3136, 50176).set(NodeConfig.MAX_IMAGES, 1).shmBudgetBytes(64L << 20).build();
        assertEquals(null, imageJob.videoEncoding(), "an image manifest: no video");
        assertEquals(null, imageJob.encodeOptions().video());
        assertEquals(dev.stoker.encode.EncodeOptions.defaults(dev.stoker.core.ProcessorPreset.QWEN2_VL).withPixels(3136, 50176)
                .withMaxImages(1), imageJob.encodeOptions(), "an image job's encoding is as before video existed");
        imageJob.shm().check(); // --max-images bounds it as before
        var videoJob = NodeConfig.builder().data(videos.toString()).batch(2).processor(dev.stoker.core.ProcessorPreset.QWEN2_VL).build();
        assertTrue(videoJob.encodeOptions().video() != null, "a manifest with a video record: video on");
        assertTrue(NodeConfig.builder().build().videoEncoding() != null, "no --data (encode): video on");
        var forced = NodeConfig.builder().data(images.toString()).set(NodeConfig.VIDEO, NodeConfig.VideoMode.ON).build();
        assertTrue(forced.videoEncoding() != null, "--video on over an image manifest");
    }

    @Test
    void aModelFoldersVideoProcessorConfigGivesTheDefaultsAndAFieldStokerCannotReproduceIsRefusedNamed() throws Exception {
        Path qwen3 = ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl"); // 4.57.0.dev0: video rules known
        Files.writeString(qwen3.resolve("video_preprocessor_config.json"), """
                {"video_processor_type": "Qwen3VLVideoProcessor", "size": {"shortest_edge": 4096, "longest_edge": 1000000},
                 "do_sample_frames": true, "fps": 1.0}""");
        var config = NodeConfig.builder().set(NodeConfig.MODEL, qwen3).set("video-max-pixels", "500000").build();
        VideoEncoding v = config.videoEncoding();
        assertEquals(Map.of(VideoKey.FPS, 1.0, VideoKey.MIN_PIXELS, 4096.0, VideoKey.MAX_PIXELS, 1e6), v.processor().values());
        assertEquals(Map.of(VideoKey.MAX_PIXELS, 500000.0), v.options().values(), "a key given goes over the folder's");
        assertEquals(VideoContract.TRANSFORMERS_4_57, v.contract(), "the folder's release");

        Files.writeString(qwen3.resolve("video_preprocessor_config.json"), """
                {"video_processor_type": "Qwen3VLVideoProcessor", "size": {"shortest_edge": 4096, "longest_edge": 1000000},
                 "do_sample_frames": false}""");
        var e = assertThrows(ConfigException.class, () -> NodeConfig.builder().set(NodeConfig.MODEL, qwen3).build());
        assertTrue(e.getMessage().startsWith("--model " + qwen3 + ": ") && e.getMessage().contains("do_sample_frames")
                && e.getMessage().endsWith("(a job without video: --video off)"), e.getMessage());
        Files.writeString(qwen3.resolve("video_preprocessor_config.json"), """
                {"size": {"shortest_edge": 4096, "longest_edge": 1000000}, "frame_jitter": 3}""");
        e = assertThrows(ConfigException.class, () -> NodeConfig.builder().set(NodeConfig.MODEL, qwen3).build());
        assertTrue(e.getMessage().contains("frame_jitter"), e.getMessage());
        var imagesOnly = NodeConfig.builder().set(NodeConfig.MODEL, qwen3).set("video", "off").build();
        assertNotNull(imagesOnly.encodeOptions(), "without video the folder's video config is not read");
    }
}
