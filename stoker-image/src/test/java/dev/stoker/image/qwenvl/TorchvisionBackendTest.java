package dev.stoker.image.qwenvl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.VisionConfig;
import dev.stoker.image.RgbImage;
import dev.stoker.testkit.Vectors;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link QwenVlImageTransform} with {@link ImageBackend#TORCHVISION} against fixtures of transformers 5.18's
 * torchvision {@code Qwen2VLImageProcessor} as ref_qwenvl_video.py builds it (tools/torch-resize-fixtures,
 * {@code torchvision_image}; checked against the real processor by check_real_torch.py).
 */
@Timeout(60)
class TorchvisionBackendTest {

    @Test
    void equalsTheTorchvisionProcessor() throws IOException {
        var in = Objects.requireNonNull(getClass().getResourceAsStream("/dev/stoker/image/torch/torchvision_image_cases.csv"));
        int cases = 0;
        try (var r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                if (line.isBlank() || line.startsWith("#")) continue;
                String[] f = line.split(",");
                int w = Integer.parseInt(f[3]), h = Integer.parseInt(f[4]);
                VisionConfig cfg = VideoPatchWriterTest.family(f[2]).withPixels(Long.parseLong(f[5]), Long.parseLong(f[6]));
                var img = new RgbImage(w, h, BicubicResizerTest.syntheticImage(Long.parseLong(f[0]), Integer.parseInt(f[1]), w, h));
                var torch = new QwenVlImageTransform(cfg, ImageBackend.TORCHVISION);
                var features = torch.apply(img);
                String where = line;
                assertArrayEquals(new long[] {Long.parseLong(f[7]), Long.parseLong(f[8]), Long.parseLong(f[9])}, features.gridThw(), where);
                assertEquals(f[10], Vectors.sha256(features.pixelValues()), () -> "torchvision pixel_values differ: " + where);
                var plan = torch.plan(h, w);
                try (var arena = Arena.ofConfined()) {
                    var seg = arena.allocate(plan.byteSize() + 5);
                    torch.writePixelValues(img, plan, seg, 5);
                    float[] back = new float[features.pixelValues().length];
                    java.lang.foreign.MemorySegment.copy(seg, PatchWriter.FLOAT_LE, 5, back, 0, back.length);
                    assertArrayEquals(features.pixelValues(), back, where);
                }
                var pil = new QwenVlImageTransform(cfg).apply(img);
                assertArrayEquals(features.gridThw(), pil.gridThw(), "same smart_resize: " + where);
                assertNotEquals(f[10], Vectors.sha256(pil.pixelValues()), "the PIL backend should give other pixel_values: " + where);
                cases++;
            }
        }
        assertTrue(cases >= 6, "only " + cases + " cases");
    }

    @Test
    void backendNamesParse() {
        assertEquals(ImageBackend.TORCHVISION, ImageBackend.parse("TorchVision"));
        assertEquals("pil", ImageBackend.PIL.cliName());
        var e = assertThrows(IllegalArgumentException.class, () -> ImageBackend.parse("cv2"));
        assertTrue(e.getMessage().contains("cv2"), e.getMessage());
    }
}
