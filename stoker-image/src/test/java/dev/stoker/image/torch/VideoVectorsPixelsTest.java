package dev.stoker.image.torch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.VisionConfig;
import dev.stoker.image.qwenvl.VideoPatchWriter;
import dev.stoker.testkit.Vectors;
import java.io.ByteArrayOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The kernels and the patchify end to end against the Qwen-VL video vectors' decoder-independent cases
 * ({@code ../shared/vectors/qwen-vl-video}: lossless clips, so any conformant decoder gives the exact frames): each
 * video decoded with the {@code ffmpeg} CLI (checked against the case's {@code decoded_frames_sha256}), the case's
 * frame indices taken, resized to its {@code resized_hw} with the sampler's kernel ({@code hf}: torchvision v2 uint8,
 * {@link TorchBicubicU8Resizer}; {@code qwen-vl-utils}: torchvision v1 float at AVX2, {@link TorchBicubicF32Resizer}),
 * normalized and patchified by {@link VideoPatchWriter}; {@code pixel_values_videos.npy} must match bit for bit
 * (transformers 5.18.0 / 4.57.6, torch 2.13.0+cpu, torchvision 0.28.0). Sampling and smart_resize are not tested here
 * (their values are read from case.json). Skipped, saying so, without the shared folder or {@code ffmpeg}.
 */
@Timeout(120)
class VideoVectorsPixelsTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    static Path vectors() {
        String prop = System.getProperty("stoker.shared.dir");
        Path shared = prop != null ? Path.of(prop) : Vectors.projectDir().resolve("../shared").normalize();
        return shared.resolve("vectors/qwen-vl-video");
    }

    @ParameterizedTest
    @ValueSource(strings = {"d03_qwen3vl_hf_png2fps_ties", "d04_qwen25vl_qvu_x264rgb_fps4", "d12_qwen3vl_hf_image_then_video_multiturn",
            "d13_qwen25vl_hf_image_and_video_two_turns", "d14_qwen2vl_qvu_two_videos", "d15_qwen3vl_qvu_png2fps"})
    void pixelValuesVideosMatchBitForBit(String id) throws Exception {
        Path dir = vectors().resolve(id);
        Assumptions.assumeTrue(Files.isRegularFile(dir.resolve("case.json")), "no Qwen-VL video vectors at " + dir + " (-Dstoker.shared.dir)");
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/ffmpeg")) || Files.isExecutable(Path.of("/usr/local/bin/ffmpeg")),
                "no ffmpeg CLI to decode the clips");
        JsonNode c = JSON.readTree(dir.resolve("case.json").toFile());
        String family = c.get("family").asText();
        boolean hf = c.get("sampler").asText().equals("hf");
        VisionConfig vision = switch (family) {
            case "qwen2-vl" -> ProcessorPreset.QWEN2_VL.vision();
            case "qwen2.5-vl" -> ProcessorPreset.QWEN2_5_VL.vision();
            default -> ProcessorPreset.QWEN3_VL.vision();
        };
        float[] expected = Npy.read(dir.resolve("pixel_values_videos.npy")).asFloats();
        var patches = new VideoPatchWriter(vision);
        var u8 = new TorchBicubicU8Resizer();
        var f32 = new TorchBicubicF32Resizer(CpuCapability.AVX2);
        float[] actual = new float[expected.length];
        int at = 0;
        for (JsonNode v : c.get("videos")) {
            Path clip = vectors().resolve("videos").resolve(v.get("file").asText());
            byte[] all = decode(clip);
            assertEquals(v.get("decoded_frames_sha256").asText(), Vectors.sha256(all), clip + ": ffmpeg's frames are not PyAV's");
            int frames = v.get("decoded_frames").asInt();
            int frameBytes = all.length / frames;
            int[] wh = size(clip);
            assertEquals(wh[0] * wh[1] * 3, frameBytes, clip.toString());
            int rh = v.get("resized_hw").get(0).asInt(), rw = v.get("resized_hw").get(1).asInt();
            JsonNode idx = v.get("frame_indices");
            byte[] resized = new byte[idx.size() * rh * rw * 3];
            byte[] frame = new byte[frameBytes];
            byte[] out = new byte[rh * rw * 3];
            for (int k = 0; k < idx.size(); k++) {
                System.arraycopy(all, idx.get(k).asInt() * frameBytes, frame, 0, frameBytes);
                if (hf) u8.resize(frame, wh[0], wh[1], out, rw, rh);
                else f32.resize(frame, wh[0], wh[1], out, rw, rh);
                System.arraycopy(out, 0, resized, k * out.length, out.length);
            }
            int rows = patches.rows(idx.size(), rw, rh);
            patches.write(resized, idx.size(), rw, rh, actual, at);
            at += rows * patches.rowLength();
        }
        assertEquals(expected.length, at, id + ": rows");
        int differ = 0;
        for (int i = 0; i < expected.length; i++) if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(actual[i])) differ++;
        assertEquals(0, differ, id + ": " + differ + " of " + expected.length + " pixel values differ");
    }

    private static byte[] decode(Path clip) throws Exception {
        return run("ffmpeg", "-v", "error", "-nostdin", "-noautorotate", "-i", clip.toString(), "-fps_mode", "passthrough", "-f", "rawvideo",
                "-pix_fmt", "rgb24", "-");
    }

    private static int[] size(Path clip) throws Exception {
        String s = new String(run("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0",
                clip.toString())).trim();
        String[] f = s.split(",");
        return new int[] {Integer.parseInt(f[0]), Integer.parseInt(f[1])};
    }

    private static byte[] run(String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        var out = new ByteArrayOutputStream();
        try (var in = p.getInputStream()) {
            in.transferTo(out);
        }
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), String.join(" ", cmd) + " did not finish");
        assertEquals(0, p.exitValue(), String.join(" ", cmd));
        return out.toByteArray();
    }
}
