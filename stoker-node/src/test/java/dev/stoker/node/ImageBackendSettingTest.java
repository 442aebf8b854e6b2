package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.image.qwenvl.ImageBackend;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code --image-backend}: given, it wins; else the backend {@code AutoProcessor} loads on the trainer's transformers
 * release (4.57 and later: torchvision), PIL without a release, and PIL with the compact pixel format; torchvision
 * given with the compact format is refused naming both options.
 */
@Timeout(60)
class ImageBackendSettingTest {
    @TempDir Path tmp;

    private static ImageBackend backend(NodeConfig.Builder b) {
        return b.data("d.jsonl").build().encodeOptions().imageBackend();
    }

    @Test
    void defaultFollowsTheTransformersRelease() throws Exception {
        assertEquals(ImageBackend.PIL, backend(NodeConfig.builder()), "no release named: PIL, as before");
        assertEquals(ImageBackend.TORCHVISION, backend(NodeConfig.builder().set("transformers", "5.18")));
        assertEquals(ImageBackend.TORCHVISION, backend(NodeConfig.builder().set("transformers", "4.57.6")));
        assertEquals(ImageBackend.PIL, backend(NodeConfig.builder().set("transformers", "4.49.0")));
        assertEquals(ImageBackend.PIL, backend(NodeConfig.builder().set("transformers", "5.18").set("image-backend", "pil")));
        assertEquals(ImageBackend.TORCHVISION, backend(NodeConfig.builder().set("image-backend", "torchvision")));
        assertEquals(ImageBackend.PIL, backend(NodeConfig.builder().set("transformers", "5.18").set("pixel-format", "uint8")),
                "the compact format's trainer-side normalize is PIL's");
        Path qwen3 = dev.stoker.testkit.ModelFolders.write(tmp.resolve("qwen3"), "qwen3-vl"); // saved with 4.57.0.dev0
        assertEquals(ImageBackend.TORCHVISION, backend(NodeConfig.builder().set(NodeConfig.MODEL, qwen3)));
        Path qwen25 = dev.stoker.testkit.ModelFolders.write(tmp.resolve("qwen25"), "qwen2.5-vl"); // 4.49.0
        assertEquals(ImageBackend.PIL, backend(NodeConfig.builder().set(NodeConfig.MODEL, qwen25)));
    }

    @Test
    void torchvisionWithTheCompactFormatIsRefused() {
        var e = assertThrows(ConfigException.class, () -> NodeConfig.builder().data("d.jsonl").set("image-backend", "torchvision")
                .set("pixel-format", "uint8").build().encodeOptions());
        assertTrue(e.getMessage().startsWith("--pixel-format uint8 with --image-backend torchvision"), e.getMessage());
        var bad = assertThrows(ConfigException.class, () -> NodeConfig.builder().set("image-backend", "opencv"));
        assertTrue(bad.getMessage().contains("--image-backend"), bad.getMessage());
    }
}
