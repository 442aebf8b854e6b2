package dev.stoker.encode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.EncodeOptions.InputContract;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Versions are read strictly and written back as given; MAJOR.MINOR alone chooses the contract, 5.3 its boundary. */
@Timeout(60)
class TransformersVersionTest {
    @Test
    void parsesStrictlyAndWritesBackAsGiven() {
        for (String v : List.of("4.57.6", "5.18", "5", "4.57.0.dev0", "5.0.0rc1", "5.2.post1", "4.45.0a1", "5.3b2"))
            assertEquals(v, TransformersVersion.parse(v).toString(), v);
        assertEquals(new TransformersVersion(4, 57, 0, ".dev0"), TransformersVersion.parse("4.57.0.dev0"));
        assertEquals(new TransformersVersion(5, -1, -1, ""), TransformersVersion.parse("5"));
        for (String bad : List.of("", "five", "v5", "5.", "5.x", "5.18.0.1", "5..1", "5.18-rc1", "5.18 ", "5.18dev", "5.18.dev", "+5"))
            assertTrue(assertThrows(IllegalArgumentException.class, () -> TransformersVersion.parse(bad)).getMessage()
                    .startsWith("'" + bad + "' is not a transformers version: expected MAJOR[.MINOR[.PATCH]]"), bad);
    }

    /** docs/model-inputs.md §3: get_rope_index reads mm_token_type_ids from 5.3.0 (PR #43972); 5.0–5.2 take 4.x's inputs. */
    @Test
    void fivePointThreeIsTheBoundaryOfTheInputContract() {
        for (String v : List.of("4", "4.51.3", "4.57.6", "4.99", "5.0.0", "5.0.0rc1", "5.2.9", "5.2.post1", "3.0"))
            assertEquals(InputContract.QWEN_VL_FINETUNE, TransformersVersion.parse(v).inputContract(), v);
        for (String v : List.of("5", "5.3", "5.3.0", "5.3.0.dev0", "5.3.0rc1", "5.17.0", "5.18", "6", "6.0.0"))
            assertEquals(InputContract.TRANSFORMERS_5_3, TransformersVersion.parse(v).inputContract(), v);
        assertEquals(EncodeOptions.DEFAULT_INPUT_CONTRACT, TransformersVersion.inputContract(null), "none: the official tensors");
        assertEquals(InputContract.QWEN_VL_FINETUNE, EncodeOptions.DEFAULT_INPUT_CONTRACT);
        assertEquals(1, InputContract.QWEN_VL_FINETUNE.positionPad());
        assertEquals(0, InputContract.TRANSFORMERS_5_3.positionPad());
    }

    /** docs/model-inputs.md §7a: AutoProcessor loads the torchvision Qwen2-VL image processor from 4.57 (read and run on 4.57.6, 5.18.0). */
    @Test
    void fourPointFiftySevenIsTheBoundaryOfTheImageBackend() {
        for (String v : List.of("4.41.2", "4.49.0", "4.56.9", "3.0"))
            assertEquals(dev.stoker.image.qwenvl.ImageBackend.PIL, TransformersVersion.parse(v).imageBackend(), v);
        for (String v : List.of("4", "4.57.0.dev0", "4.57.6", "5", "5.0.0rc1", "5.18"))
            assertEquals(dev.stoker.image.qwenvl.ImageBackend.TORCHVISION, TransformersVersion.parse(v).imageBackend(), v);
        assertEquals(dev.stoker.image.qwenvl.ImageBackend.PIL, TransformersVersion.imageBackend(null), "none: PIL, as before");
        assertTrue(assertThrows(IllegalArgumentException.class, () -> EncodeOptions.defaults(dev.stoker.core.ProcessorPreset.QWEN2_VL)
                .withPixelFormat(EncodeOptions.PixelFormat.UINT8).withImageBackend(dev.stoker.image.qwenvl.ImageBackend.TORCHVISION))
                .getMessage().startsWith("--pixel-format uint8 with --image-backend torchvision"));
    }
}
