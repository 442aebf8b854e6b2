package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.image.RgbImage;
import dev.stoker.image.qwenvl.ImageBackend;
import dev.stoker.image.qwenvl.QwenVlImageTransform;
import java.awt.image.BufferedImage;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code stoker encode --image-backend}: the option reaches the image transform (each backend's pixel_values equal
 * {@link QwenVlImageTransform} with that backend, whose exactness stoker-image's TorchvisionBackendTest holds), the
 * default without a transformers release is PIL, and a bad value is refused naming the option.
 */
@Timeout(120)
class ImageBackendCliTest {
    @TempDir Path tmp;

    @Test
    void encodeUsesTheChosenBackend() throws Exception {
        int w = 97, h = 61;
        byte[] rgb = new byte[w * h * 3];
        long state = 5000011L;
        for (int i = 0; i < rgb.length; i++) {
            state = state * 6364136223846793005L + 1442695040888963407L;
            rgb[i] = (byte) (state >>> 56);
        }
        var png = new BufferedImage(w, h, BufferedImage.TYPE_INT_RGB);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int o = (y * w + x) * 3;
                png.setRGB(x, y, (rgb[o] & 0xFF) << 16 | (rgb[o + 1] & 0xFF) << 8 | rgb[o + 2] & 0xFF);
            }
        ImageIO.write(png, "png", tmp.resolve("a.png").toFile());
        Path sample = Files.writeString(tmp.resolve("sample.json"), """
                {"id": "b1", "image": "a.png", "conversations": [
                  {"from": "human", "value": "<image>\\nWhat is here?"}, {"from": "gpt", "value": "Noise."}]}""");
        var img = new RgbImage(w, h, rgb);
        var vision = ProcessorPreset.QWEN2_VL.vision();
        float[] torch = run(sample, "torch", "--image-backend", "torchvision");
        float[] pil = run(sample, "pil", "--image-backend", "pil");
        float[] byDefault = run(sample, "default");
        assertArrayEquals(new QwenVlImageTransform(vision, ImageBackend.TORCHVISION).apply(img).pixelValues(), torch);
        assertArrayEquals(new QwenVlImageTransform(vision, ImageBackend.PIL).apply(img).pixelValues(), pil);
        assertArrayEquals(pil, byDefault, "no --transformers: PIL, as before the option existed");
        assertFalse(Arrays.equals(pil, torch));
        var bad = CliRunner.run("encode", "--processor", "qwen2-vl", "--image-backend", "opencv", "--sample", sample.toString(), "--out",
                tmp.resolve("bad").toString());
        assertEquals(2, bad.status(), bad.err());
        assertTrue(bad.err().contains("--image-backend"), bad.err());
    }

    private float[] run(Path sample, String out, String... extra) throws Exception {
        var args = new java.util.ArrayList<>(java.util.List.of("encode", "--processor", "qwen2-vl", "--exif", "ignore", "--sample",
                sample.toString(), "--out", tmp.resolve(out).toString()));
        args.addAll(Arrays.asList(extra));
        var r = CliRunner.run(args.toArray(String[]::new));
        assertEquals(0, r.status(), r.err());
        return Npy.read(tmp.resolve(out).resolve("pixel_values.npy")).asFloats();
    }
}
