package dev.stoker.plan.pack;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.model.ModelFolder.ModelFolderException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The cost model against numbers computed by hand from the published configs (docs/packing.md). */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class PackCostTest {

    @Test
    void parameterCountsOfTheDefaultsAreTheHandComputedOnes() {
        // Qwen2-VL-2B: 28 × (1536·128·(24+4) + 3·1536·8960) + 1536·151936; ViT 32 × 12·1280² + 1176·1280 + (5120² + 5120·1536)/4.
        assertEquals(1_543_569_408d, PackCost.QWEN2_VL_2B.llmParams());
        assertEquals(639_170_560d, PackCost.QWEN2_VL_2B.vitParams());
        // Qwen2.5-VL-3B: 36 × (2048·128·36 + 3·2048·11008) + 2048·151936; ViT 32 × (4·1280² + 3·1280·3420) + 1176·1280 + (5120² + 5120·2048)/4.
        assertEquals(3_085_697_024d, PackCost.QWEN2_5_VL_3B.llmParams());
        assertEquals(640_645_120d, PackCost.QWEN2_5_VL_3B.vitParams());
        assertEquals(4, PackCost.QWEN2_5_VL_3B.vitAttentionLayers());
        // Qwen3-VL-2B: 28 × (2048·128·48 + 3·2048·6144) + 2048·151936; ViT 24 × (4·1024² + 2·1024·4096) + 1536·1024 + 4·(4096² + 4096·2048)/4.
        assertEquals(1_720_451_072d, PackCost.QWEN3_VL_2B.llmParams());
        assertEquals(328_728_576d, PackCost.QWEN3_VL_2B.vitParams());
        assertEquals(PackCost.QWEN3_VL_2B, PackCost.forFamily(ProcessorPreset.QWEN3_VL));
    }

    @Test
    void aSamplesFlopsAreItsTokensAndItsImages() {
        PackCost c = PackCost.QWEN2_VL_2B;
        // 6·1543569408·1000 + 6·28·1536·1000²
        assertEquals(9_519_464_448_000d, c.tokenFlops(1000));
        // 6·639170560·1024 + 12·32·1280·1024²
        assertEquals(4_442_459_996_160d, c.imageFlops(1024));
        assertEquals(13_961_924_444_160d, c.flops(SampleShape.of(1000, 1024)));
        assertEquals(c.tokenFlops(1000) + 2 * c.imageFlops(512), c.flops(SampleShape.of(1000, 512, 512)));
        // Frozen vision tower: forward only, 2·640645120·1024 + 4·4·1280·1024² for Qwen2.5-VL-3B.
        assertEquals(1_333_516_042_240d, PackCost.QWEN2_5_VL_3B.withVisionTrained(false).imageFlops(1024), 1e-3);
        assertEquals(0d, c.flops(SampleShape.of(0)));
    }

    @Test
    void aModelFoldersConfigGivesTheSameNumbersAsTheDefaults(@TempDir Path dir) throws Exception {
        // As published: Qwen2-VL-2B leaves the ViT's depth and width to Qwen2VLVisionConfig's defaults.
        write(dir, """
                {"model_type": "qwen2_vl", "hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
                 "num_hidden_layers": 28, "num_key_value_heads": 2, "vocab_size": 151936,
                 "vision_config": {"hidden_size": 1536, "in_chans": 3, "model_type": "qwen2_vl", "spatial_patch_size": 14}}""");
        assertEquals(PackCost.QWEN2_VL_2B, PackCost.fromModelFolder(dir));
        write(dir, """
                {"model_type": "qwen2_5_vl", "hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16,
                 "num_hidden_layers": 36, "num_key_value_heads": 2, "vocab_size": 151936,
                 "vision_config": {"hidden_size": 1280, "out_hidden_size": 2048, "spatial_patch_size": 14}}""");
        assertEquals(PackCost.QWEN2_5_VL_3B, PackCost.fromModelFolder(dir));
        write(dir, """
                {"model_type": "qwen3_vl", "text_config": {"hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 16,
                 "num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
                 "vision_config": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16,
                 "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                 "deepstack_visual_indexes": [5, 11, 17]}}""");
        assertEquals(PackCost.QWEN3_VL_2B, PackCost.fromModelFolder(dir));
    }

    @Test
    void aConfigItCannotUseIsRefusedNamingTheField(@TempDir Path dir) throws Exception {
        write(dir, """
                {"model_type": "qwen3_vl", "text_config": {"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 28,
                 "vocab_size": 151936}, "vision_config": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096}}""");
        var e = assertThrows(ModelFolderException.class, () -> PackCost.fromModelFolder(dir));
        assertTrue(e.getMessage().contains("intermediate_size") && e.getMessage().contains("config.json"), e.getMessage());
        write(dir, "{\"model_type\": \"llava\"}");
        e = assertThrows(ModelFolderException.class, () -> PackCost.fromModelFolder(dir));
        assertTrue(e.getMessage().contains("model_type is 'llava'"), e.getMessage());
        write(dir, "{\"model_type\": \"qwen2_vl\", \"hidden_size\": -3}");
        e = assertThrows(ModelFolderException.class, () -> PackCost.fromModelFolder(dir));
        assertTrue(e.getMessage().contains("hidden_size is -3"), e.getMessage());
        assertThrows(ModelFolderException.class, () -> PackCost.fromModelFolder(dir.resolve("missing")));
        assertThrows(IllegalArgumentException.class, () -> new PackCost(-1, 1, 1, 1, 1, 1, true));
    }

    private static void write(Path dir, String json) throws Exception {
        Files.writeString(dir.resolve("config.json"), json);
    }
}
