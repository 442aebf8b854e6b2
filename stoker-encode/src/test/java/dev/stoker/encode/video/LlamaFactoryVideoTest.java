package dev.stoker.encode.video;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.LlamaFactoryVideoRules;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.zip.CRC32;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The {@code llamafactory} video sampler encoded (issue 29, Build item 5): {@link SampleEncoder#encode} on clips made by
 * the ffmpeg CLI against fixtures made by tools/video-llamafactory-fixtures/make_fixtures.py, a port of LLaMA-Factory's
 * Qwen-VL video path (hiyouga/LLaMA-Factory@ff6d4d12: {@code _get_video_sample_indices}, {@code Qwen2VLPlugin
 * ._regularize_videos} with PyAV 18.1's {@code frame.to_image()}, {@code _preprocess_image}'s Pillow 12.3
 * {@code Image.resize} calls) and the real transformers 5.18.0 video processor called as its plugins call it:
 * pixel_values_videos bit for bit (its SHA-256, and each row's CRC-32 to say where it differs), video_grid_thw, the
 * {@code <|video_pad|>} count, the frames kept, Qwen2.5's second_per_grid_ts. The cases: one Pillow resize (320x240 over
 * 65,536 pixels), two chained (4000x20: shrunk to 3620x18, then its short side raised to 28), none (176x144).
 */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class LlamaFactoryVideoTest {
    static final String ROOT = "/dev/stoker/encode/video/llamafactory/";
    static final long VIDEO_PAD = 151656;
    static final ObjectMapper JSON = new ObjectMapper();

    static byte[] resource(String path) {
        try (var in = LlamaFactoryVideoTest.class.getResourceAsStream(ROOT + path)) {
            if (in == null) throw new IllegalStateException("no test resource " + ROOT + path);
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static SampleEncoder encoder(ProcessorPreset preset, EncodeOptions.PixelFormat format) {
        var video = new VideoEncoding(VideoSampler.LLAMAFACTORY, VideoOptions.DEFAULTS, null, VideoContract.TRANSFORMERS_5_18,
                CpuCapability.AVX2, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        var options = EncodeOptions.defaults(preset).withVideo(video);
        if (format != null) options = options.withPixelFormat(format);
        return new SampleEncoder(options, SharedTokenizer.get());
    }

    /** A record in LLaMA-Factory's layout holding one video. */
    static byte[] record(String video) {
        var root = JSON.createObjectNode();
        var messages = root.putArray("messages");
        messages.addObject().put("role", "user").put("content", "<video>What moves?");
        messages.addObject().put("role", "assistant").put("content", "Colours.");
        root.putArray("videos").add(video);
        return root.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** The SHA-256 of {@code values} as little-endian float32, and a mismatch's first row by the rows' CRC-32s. */
    static void assertBitExact(String name, float[] values, int rowLength, JsonNode expected, long[] rowCrcs) throws Exception {
        var shape = expected.get("pixel_values_videos_shape");
        assertEquals(shape.get(0).asLong() * shape.get(1).asLong(), values.length, name + ": pixel_values_videos size");
        assertEquals(shape.get(1).asInt(), rowLength, name + ": row length");
        var bytes = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        bytes.asFloatBuffer().put(values);
        byte[] raw = bytes.array();
        for (int r = 0; r < rowCrcs.length; r++) {
            var crc = new CRC32();
            crc.update(raw, r * rowLength * 4, rowLength * 4);
            if (crc.getValue() != rowCrcs[r]) throw new AssertionError(name + ": pixel_values_videos differs first in row " + r);
        }
        String sha = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(raw));
        assertEquals(expected.get("pixel_values_videos_sha256").asText(), sha, name + ": pixel_values_videos SHA-256");
    }

    static ProcessorPreset family(String name) {
        return switch (name) {
            case "qwen2-vl" -> ProcessorPreset.QWEN2_VL;
            case "qwen2.5-vl" -> ProcessorPreset.QWEN2_5_VL;
            case "qwen3-vl" -> ProcessorPreset.QWEN3_VL;
            default -> throw new IllegalArgumentException(name);
        };
    }

    @ParameterizedTest
    @ValueSource(strings = {"l1_qwen25_320x240", "l2_qwen3_4000x20", "l3_qwen2_176x144"})
    void encodesAsLlamaFactoryAndTheProcessorDo(String name) throws Exception {
        JsonNode expected = JSON.readTree(resource(name + "/expected.json"));
        assertEquals("5.18.0", expected.get("transformers").asText());
        ProcessorPreset preset = family(expected.get("family").asText());
        var enc = encoder(preset, null);
        String clip = name + "/clip.mp4";
        byte[] clipBytes = resource(clip);
        var sample = enc.parse(record(clip), name);
        EncodedSample out = enc.encode(sample, (id, ref) -> {
            throw new IllegalStateException("no image here: " + ref);
        }, (id, ref) -> SeekableByteSource.of(ref, clipBytes));
        var v = out.videos();
        long[] crcs = Npy.read(resource(name + "/row_crc32.npy"), "row_crc32").asLongs();
        assertBitExact(name, v.pixelValuesVideos(), v.rowLength(), expected, crcs);
        long[] grid = Npy.read(resource(name + "/video_grid_thw.npy"), "video_grid_thw").asLongs();
        assertArrayEquals(grid, v.videoGridThw());
        long pads = 0;
        for (long id : out.inputIds()) if (id == VIDEO_PAD) pads++;
        assertEquals(grid[0] * grid[1] * grid[2] / 4, pads, "<|video_pad|> tokens");
        long[] kept = JSON.convertValue(expected.get("frames_kept"), long[].class);
        assertArrayEquals(kept, v.frameIndices(), "the frames LLaMA-Factory keeps (frame_indices: before the odd-count padding)");
        assertEquals(expected.get("padded_frames").asInt(), grid[0] * 2, "an odd count padded with the last frame");
        if (preset == ProcessorPreset.QWEN2_5_VL)
            assertArrayEquals(new float[] {(float) expected.get("second_per_grid_ts").asDouble()}, v.secondPerGridTs());
    }

    /** The Pillow resize calls Stoker plans are those the port made on the fixtures' first frame. */
    @ParameterizedTest
    @ValueSource(strings = {"l1_qwen25_320x240", "l2_qwen3_4000x20", "l3_qwen2_176x144"})
    void thePreResizeStepsAreThePorts(String name) throws Exception {
        JsonNode expected = JSON.readTree(resource(name + "/expected.json"));
        String[] wh = name.substring(name.lastIndexOf('_') + 1).split("x");
        int[][] steps = LlamaFactoryVideoRules.preResizeSteps(name, Integer.parseInt(wh[0]), Integer.parseInt(wh[1]),
                LlamaFactoryVideoRules.DEFAULT_MAX_PIXELS, LlamaFactoryVideoRules.DEFAULT_MIN_PIXELS);
        assertArrayEquals(JSON.convertValue(expected.get("pre_resize_steps"), int[][].class), steps);
    }

    /**
     * A clip made here by {@link FfmpegClips} (a size not in the fixtures, over video_max_pixels): the compact u8 format
     * carries the frames the float format normalizes, so the trainer's conversion gives the float rows bit for bit.
     */
    @Test
    void theCompactFormatConvertsToTheFloatRows(@TempDir Path dir) throws Exception {
        FfmpegClips.require();
        Path clip = FfmpegClips.h264(dir.resolve("c.mp4"), "400x300", "6", 1.0);
        byte[] bytes = Files.readAllBytes(clip);
        VideoPreprocessor.VideoSource src = (id, ref) -> SeekableByteSource.of(ref, bytes);
        SampleEncoder.ImageSource none = (id, ref) -> {
            throw new IllegalStateException("no image here: " + ref);
        };
        var floats = encoder(ProcessorPreset.QWEN2_5_VL, null);
        var f = floats.encode(floats.parse(record("c.mp4"), "c"), none, src).videos();
        var compactEnc = encoder(ProcessorPreset.QWEN2_5_VL, EncodeOptions.PixelFormat.UINT8);
        var c = compactEnc.encode(compactEnc.parse(record("c.mp4"), "c"), none, src).videos();
        assertTrue(c.compact());
        assertArrayEquals(new long[] {2}, c.frameCounts(), "1 s at video_fps 2: frames 0 and 5");
        float[] rows = dev.stoker.image.qwenvl.CompactPixels.toPixelValuesVideos(java.lang.foreign.MemorySegment.ofArray(c.pixelsU8()),
                c.videoGridThw(), c.frameCounts(), EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).vision());
        float[] want = f.pixelValuesVideos();
        assertEquals(want.length, rows.length);
        for (int i = 0; i < want.length; i++)
            if (Float.floatToRawIntBits(want[i]) != Float.floatToRawIntBits(rows[i])) throw new AssertionError("value " + i);
        // 400x300 → Pillow 295x221 (int(400·0.7390), int(300·0.7390)) → Qwen2.5's smart_resize 224x308 → grid 1x16x22
        assertArrayEquals(new long[] {1, 16, 22}, f.videoGridThw());
    }

    /**
     * The decode memory budget counts the pre-resize's two buffers: l1's 3 frames of 308x224 (620,928 bytes), one
     * decoded 320x240 frame (230,400) and two of Pillow's 295x221 (391,170) are 1,242,498 bytes: planned at that
     * budget, refused one byte under it, naming the pre-resize.
     */
    @Test
    void theMemoryBudgetCountsThePreResize() {
        var video = new VideoEncoding(VideoSampler.LLAMAFACTORY, VideoOptions.DEFAULTS, null, VideoContract.TRANSFORMERS_5_18,
                CpuCapability.AVX2, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        var vision = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).vision();
        byte[] clip = resource("l1_qwen25_320x240/clip.mp4");
        VideoPreprocessor.VideoSource src = (id, ref) -> SeekableByteSource.of(ref, clip);
        var item = dev.stoker.text.Message.Video.of("clip.mp4");
        var planned = new VideoPreprocessor(ProcessorPreset.QWEN2_5_VL, vision, video, 1_242_498).plan("s", item, src);
        assertEquals(295, planned.plan().frameWidth());
        var e = org.junit.jupiter.api.Assertions.assertThrows(dev.stoker.core.SampleException.class,
                () -> new VideoPreprocessor(ProcessorPreset.QWEN2_5_VL, vision, video, 1_242_497).plan("s", item, src));
        assertTrue(e.getMessage().contains("and one of 320x240 with its Pillow pre-resize need 1242498 bytes"), e.getMessage());
    }
}
