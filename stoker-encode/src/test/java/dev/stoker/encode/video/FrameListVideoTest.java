package dev.stoker.encode.video;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.image.torch.CpuCapability;
import dev.stoker.text.ChatSample;
import dev.stoker.text.VideoContract;
import dev.stoker.video.sample.VideoOptions;
import dev.stoker.video.sample.VideoSampler;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Videos given as lists of frame images (issue 29, Build item 2): {@link SampleEncoder#encode} against fixtures made by
 * tools/video-framelist-fixtures/make_fixtures.py (a port of qwen-vl-utils' {@code fetch_video} list branch, Pillow 12.3
 * for each frame's {@code fetch_image}, torchvision 0.28's v1 resize, then the real transformers 5.18.0 and 4.57.6
 * processors with {@code do_sample_frames=False, do_resize=False}, under the matching {@code --transformers} contract):
 * pixel_values_videos bit for bit (the same in both releases), video_grid_thw, the {@code <|video_pad|>} count,
 * second_per_grid_ts (Qwen2.5) and the {@code <t seconds>} texts (Qwen3). The cases cover an odd count padded with its
 * last frame (3 → 4, 1 → 2), PNG and JPEG frames, {@code min_pixels}/{@code max_pixels}/{@code total_pixels},
 * {@code resized_height}/{@code resized_width}, {@code sample_fps} and {@code raw_fps}; and the refusals: keys a list
 * does not read, the hf sampler, frames of different sizes, an RGBA frame, a missing frame.
 */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class FrameListVideoTest {
    static final String ROOT = "/dev/stoker/encode/video/framelist/";
    static final long VIDEO_PAD = 151656;
    static final ObjectMapper JSON = new ObjectMapper();
    /** The samples here hold no video file. */
    static final VideoPreprocessor.VideoSource NO_FILES = (id, ref) -> {
        throw new IOException("no video file here: " + ref);
    };

    static byte[] resource(String path) {
        try (var in = FrameListVideoTest.class.getResourceAsStream(ROOT + path)) {
            if (in == null) throw new IllegalStateException("no test resource " + ROOT + path);
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static ProcessorPreset family(String name) {
        return switch (name) {
            case "qwen2-vl" -> ProcessorPreset.QWEN2_VL;
            case "qwen2.5-vl" -> ProcessorPreset.QWEN2_5_VL;
            case "qwen3-vl" -> ProcessorPreset.QWEN3_VL;
            default -> throw new IllegalArgumentException(name);
        };
    }

    static SampleEncoder encoder(ProcessorPreset preset, VideoSampler sampler) {
        return encoder(preset, sampler, VideoContract.TRANSFORMERS_5_18);
    }

    static SampleEncoder encoder(ProcessorPreset preset, VideoSampler sampler, VideoContract contract) {
        var video = new VideoEncoding(sampler, VideoOptions.DEFAULTS, null, contract, CpuCapability.AVX2,
                VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        return new SampleEncoder(EncodeOptions.defaults(preset).withVideo(video), SharedTokenizer.get());
    }

    /** An HF messages record whose user turn holds the video item {@code item} with {@code "video": frames}. */
    static String record(List<String> frames, JsonNode item) {
        var video = JSON.createObjectNode().put("type", "video");
        var list = video.putArray("video");
        frames.forEach(list::add);
        if (item != null) item.properties().forEach(e -> video.set(e.getKey(), e.getValue()));
        var root = JSON.createObjectNode().put("id", "framelist");
        var messages = root.putArray("messages");
        var user = messages.addObject().put("role", "user");
        var content = user.putArray("content");
        content.add(video);
        content.addObject().put("type", "text").put("text", "What happens?");
        messages.addObject().put("role", "assistant").put("content", "Colours move.");
        return root.toString();
    }

    static ChatSample parse(SampleEncoder enc, String json) {
        return enc.parse(json.getBytes(StandardCharsets.UTF_8), "framelist");
    }

    /** Reads a case's frames from the resources, counting the reads. */
    static SampleEncoder.ImageSource frames(String dir, AtomicInteger reads) {
        return (id, ref) -> {
            reads.incrementAndGet();
            return resource(dir + "/" + ref);
        };
    }

    @ParameterizedTest
    @org.junit.jupiter.params.provider.CsvSource({"f1_qwen25_png_odd, 5.18", "f2_qwen3_jpeg_resized, 5.18", "f3_qwen2_png_one, 5.18",
            "f1_qwen25_png_odd, 4.57", "f2_qwen3_jpeg_resized, 4.57", "f3_qwen2_png_one, 4.57"})
    void aFrameListEncodesAsQwenVlUtilsAndTheProcessorDo(String name, String release) throws Exception {
        boolean v457 = release.equals("4.57");
        JsonNode expected = JSON.readTree(resource(name + (v457 ? "/expected-4.57.json" : "/expected.json")));
        assertEquals(v457 ? "4.57.6" : "5.18.0", expected.get("transformers").asText());
        ProcessorPreset preset = family(expected.get("family").asText());
        var enc = encoder(preset, VideoSampler.QWEN_VL_UTILS, v457 ? VideoContract.TRANSFORMERS_4_57 : VideoContract.TRANSFORMERS_5_18);
        var names = new ArrayList<String>();
        expected.get("frames").forEach(n -> names.add(n.asText()));
        ChatSample sample = parse(enc, record(names, expected.get("item")));
        var reads = new AtomicInteger();
        EncodedSample out = enc.encode(sample, frames(name, reads), NO_FILES);
        assertEquals(names.size(), reads.get(), "each frame read once");

        var pv = Npy.read(resource(name + "/pixel_values_videos.npy"), "pixel_values_videos");
        float[] want = pv.asFloats();
        float[] got = out.videos().pixelValuesVideos();
        assertEquals(want.length, got.length, "pixel_values_videos size");
        int rowLength = (int) pv.shape()[1];
        assertEquals(rowLength, out.videos().rowLength());
        for (int i = 0; i < want.length; i++) {
            if (Float.floatToRawIntBits(want[i]) != Float.floatToRawIntBits(got[i]))
                throw new AssertionError(name + ": pixel_values_videos differs first at row " + i / rowLength + " column "
                        + i % rowLength + ": " + got[i] + " != " + want[i]);
        }
        long[] grid = Npy.read(resource(name + "/video_grid_thw.npy"), "video_grid_thw").asLongs();
        assertArrayEquals(grid, out.videos().videoGridThw());
        long pads = 0;
        for (long id : out.inputIds()) if (id == VIDEO_PAD) pads++;
        assertEquals(expected.get("video_tokens").asLong(), pads, "<|video_pad|> tokens");
        assertEquals(grid[0] * grid[1] * grid[2] / 4, pads);
        long[] indices = new long[expected.get("frame_indices").size()];
        for (int i = 0; i < indices.length; i++) indices[i] = expected.get("frame_indices").get(i).asLong();
        assertArrayEquals(indices, out.videos().frameIndices(), "frame_indices: the padded list's positions");
        if (preset == ProcessorPreset.QWEN2_5_VL) {
            float[] spg = Npy.read(resource(name + "/second_per_grid_ts.npy"), "second_per_grid_ts").asFloats();
            assertEquals((double) spg[0], expected.get("second_per_grid_ts").get(0).asDouble(), "the release's own value");
            assertArrayEquals(spg, out.videos().secondPerGridTs());
        }
        if (preset == ProcessorPreset.QWEN3_VL) {
            String text = SharedTokenizer.get().decode(out.inputIds());
            var stamps = new ArrayList<String>();
            var m = java.util.regex.Pattern.compile("<[0-9.]+ seconds>").matcher(text);
            while (m.find()) stamps.add(m.group());
            var want3 = new ArrayList<String>();
            expected.get("timestamps").forEach(t -> want3.add(t.asText()));
            assertEquals(want3, stamps, "Qwen3 timestamps from raw_fps");
        }
    }

    /** The compact wire format carries the padded list's resized frames; the trainer's conversion gives the fixture's rows. */
    @Test
    void theCompactFormatConvertsToTheFixturesRows() {
        String name = "f1_qwen25_png_odd";
        var video = new VideoEncoding(VideoSampler.QWEN_VL_UTILS, VideoOptions.DEFAULTS, null, VideoContract.TRANSFORMERS_5_18,
                CpuCapability.AVX2, VideoEncoding.DEFAULT_DECODE_TIMEOUT_NANOS);
        var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withVideo(video).withPixelFormat(EncodeOptions.PixelFormat.UINT8);
        var enc = new SampleEncoder(options, SharedTokenizer.get());
        JsonNode item = JSON.createObjectNode().put("min_pixels", 784).put("total_pixels", 4704).put("sample_fps", 1.5);
        var out = enc.encode(parse(enc, record(List.of("frame0.png", "frame1.png", "frame2.png"), item)),
                frames(name, new AtomicInteger()), NO_FILES);
        var v = out.videos();
        assertTrue(v.compact());
        assertArrayEquals(new long[] {4}, v.frameCounts(), "3 frames padded to 4 as qwen-vl-utils pads the list");
        float[] rows = dev.stoker.image.qwenvl.CompactPixels.toPixelValuesVideos(java.lang.foreign.MemorySegment.ofArray(v.pixelsU8()),
                v.videoGridThw(), v.frameCounts(), options.vision());
        float[] want = Npy.read(resource(name + "/pixel_values_videos.npy"), "pixel_values_videos").asFloats();
        assertEquals(want.length, rows.length);
        for (int i = 0; i < want.length; i++)
            assertEquals(Float.floatToRawIntBits(want[i]), Float.floatToRawIntBits(rows[i]), "value " + i);
    }

    @Test
    void prepareAndMeasureReadTheFramesFromFetchedBytesAndAgreeWithEncode() {
        String name = "f1_qwen25_png_odd";
        var enc = encoder(ProcessorPreset.QWEN2_5_VL, VideoSampler.QWEN_VL_UTILS);
        JsonNode item = JSON.createObjectNode().put("min_pixels", 784).put("total_pixels", 4704);
        ChatSample sample = parse(enc, record(List.of("frame0.png", "frame1.png", "frame2.png"), item));
        assertEquals(List.of("frame0.png", "frame1.png", "frame2.png"), SampleEncoder.frameReferences(sample));
        Map<String, byte[]> fetched = new HashMap<>();
        for (String r : SampleEncoder.frameReferences(sample)) fetched.put(r, resource(name + "/" + r));
        var prepared = enc.prepare(sample, fetched, null);
        assertEquals(16, prepared.videoRows());
        assertArrayEquals(new long[] {2, 2, 4}, prepared.videoGridThw());
        assertEquals(prepared.text().inputIds().length, enc.measure(sample, fetched, null));
        fetched.remove("frame2.png");
        var e = assertThrows(SampleException.class, () -> enc.prepare(sample, fetched, null));
        assertTrue(e.getMessage().contains("frame2.png") && e.getMessage().contains("not fetched"), e.getMessage());
    }

    @Test
    void keysAListDoesNotReadAreRefusedNamingThem() {
        var enc = encoder(ProcessorPreset.QWEN2_VL, VideoSampler.QWEN_VL_UTILS);
        for (String key : List.of("fps", "nframes", "min_frames", "max_frames", "video_start", "video_end")) {
            JsonNode item = JSON.createObjectNode().put(key, 4);
            var sample = parse(enc, record(List.of("frame0.png"), item));
            var e = assertThrows(SampleException.class, () -> enc.encode(sample, frames("f3_qwen2_png_one", new AtomicInteger()), NO_FILES));
            assertTrue(e.getMessage().contains("[" + key + "]") && e.getMessage().contains("frame images"), e.getMessage());
        }
    }

    @Test
    void sampleFpsIsRefusedForAVideoFile() throws Exception {
        var planner = new dev.stoker.video.sample.VideoPlanner(ProcessorPreset.QWEN2_5_VL, VideoSampler.QWEN_VL_UTILS,
                dev.stoker.video.sample.TransformersCompat.V5_18, VideoOptions.DEFAULTS, VideoOptions.DEFAULTS);
        var e = assertThrows(IllegalArgumentException.class, () -> planner.plan("clip.mp4",
                new dev.stoker.video.sample.VideoMetadata(50, 25.0, 320, 240),
                dev.stoker.video.sample.VideoItemOptions.of(Map.of("sample_fps", 1.0), "clip.mp4")));
        assertTrue(e.getMessage().contains("sample_fps") && e.getMessage().contains("list of frame images"), e.getMessage());
    }

    @Test
    void theHfSamplerRefusesAFrameListNamingWhy() {
        var enc = encoder(ProcessorPreset.QWEN3_VL, VideoSampler.HF);
        var sample = parse(enc, record(List.of("frame0.jpg", "frame1.jpg"), null));
        var e = assertThrows(SampleException.class, () -> enc.encode(sample, frames("f2_qwen3_jpeg_resized", new AtomicInteger()), NO_FILES));
        assertTrue(e.getMessage().contains("qwen-vl-utils") && e.getMessage().contains("metadata"), e.getMessage());
    }

    @Test
    void framesOfDifferentSizesAndRgbaFramesAreRefused() throws Exception {
        var enc = encoder(ProcessorPreset.QWEN2_VL, VideoSampler.QWEN_VL_UTILS);
        Map<String, byte[]> files = new HashMap<>();
        files.put("a.png", png(80, 60, java.awt.image.BufferedImage.TYPE_INT_RGB));
        files.put("b.png", png(160, 60, java.awt.image.BufferedImage.TYPE_INT_RGB));
        files.put("c.png", png(80, 60, java.awt.image.BufferedImage.TYPE_INT_ARGB));
        SampleEncoder.ImageSource source = (id, ref) -> files.get(ref);
        var mixed = parse(enc, record(List.of("a.png", "b.png"), null));
        var e = assertThrows(SampleException.class, () -> enc.encode(mixed, source, NO_FILES));
        assertTrue(e.getMessage().contains("cannot stack frames of different sizes"), e.getMessage());
        var rgba = parse(enc, record(List.of("a.png", "c.png"), null));
        e = assertThrows(SampleException.class, () -> enc.encode(rgba, source, NO_FILES));
        assertTrue(e.getMessage().contains("c.png") && e.getMessage().contains("RGBA"), e.getMessage());
        var ok = parse(enc, record(List.of("a.png", "a.png", "a.png"), null)); // defaults: 128·28² → upscaled, still encodes
        assertEquals(2, enc.encode(ok, source, NO_FILES).videos().videoGridThw()[0]);
    }

    /** The header bytes Pillow reads to open a frame as RGBA, and their neighbours it opens as RGB. */
    @Test
    void alphaIsFoundWherePillowOpensRgba() throws Exception {
        assertEquals("an RGBA PNG", VideoPreprocessor.alphaOf(png(4, 4, java.awt.image.BufferedImage.TYPE_INT_ARGB)));
        assertEquals(null, VideoPreprocessor.alphaOf(png(4, 4, java.awt.image.BufferedImage.TYPE_INT_RGB)));
        assertEquals(null, VideoPreprocessor.alphaOf(resource("f2_qwen3_jpeg_resized/frame0.jpg")));
        byte[] bmp = new byte[70];
        bmp[0] = 'B';
        bmp[1] = 'M';
        bmp[14] = 108; // BITMAPV4HEADER
        bmp[28] = 32;
        bmp[30] = 3; // BI_BITFIELDS
        assertEquals("a 32-bit BMP with an alpha mask", VideoPreprocessor.alphaOf(bmp), "all masks 0: Pillow's BGRA");
        bmp[56] = (byte) 0xFF; // r 0xff0000
        bmp[59] = (byte) 0xFF; // g 0xff00
        bmp[62] = (byte) 0xFF; // b 0xff
        assertEquals(null, VideoPreprocessor.alphaOf(bmp), "no alpha mask: Pillow's BGRX, RGB");
        bmp[69] = (byte) 0xFF; // alpha mask 0xff000000
        assertEquals("a 32-bit BMP with an alpha mask", VideoPreprocessor.alphaOf(bmp));
        byte[] webp = "RIFF\0\0\0\0WEBPVP8X\0\0\0\0\u0010\0\0\0".getBytes(StandardCharsets.ISO_8859_1);
        assertEquals("a WebP with alpha", VideoPreprocessor.alphaOf(webp));
        webp[20] = 0;
        assertEquals(null, VideoPreprocessor.alphaOf(webp));
    }

    static byte[] png(int w, int h, int type) throws IOException {
        var img = new java.awt.image.BufferedImage(w, h, type);
        for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) img.setRGB(x, y, 0xFF000000 | (x * 3 << 16) | (y * 4 << 8) | (x + y));
        var out = new java.io.ByteArrayOutputStream();
        javax.imageio.ImageIO.write(img, "png", out);
        return out.toByteArray();
    }
}
