package dev.stoker.plan.pack;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.model.ModelFolder.ModelFolderException;
import dev.stoker.core.model.ModelFolder;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/**
 * The pack planner's cost model: the training FLOPs a sample costs its rank, predicted from its shape alone (tokens,
 * and patches per image), before anything is decoded. Balancing this number across ranks is what keeps the ranks of a
 * data-parallel step arriving at the all-reduce together.
 *
 * <p>Formula (Kaplan et al. 2020, §2.1; the PaLM paper's MFU accounting, appendix B: 6 FLOPs per weight per token for
 * forward and backward, plus the attention scores and their weighted sum, {@code 12·layers·width·T} per token of a
 * sequence of {@code T} with full attention):
 * <pre>
 *   sample of L tokens    6·llmParams·L  +  6·llmLayers·llmAttentionWidth·L²      (causal attention inside its own segment)
 *   image of P patches    6·vitParams·P  + 12·vitAttentionLayers·vitHidden·P²     (full attention inside the image)
 *   video of P = t·h·w    6·vitParams·P  + 12·vitAttentionLayers·vitHidden·P²/t   (full attention inside each of its t groups)
 * </pre>
 * The sample's own segment: in a pack, every sample attends only to itself (FlashAttention varlen over
 * {@code cu_seqlens}), so a pack costs the sum of its samples, and the ViT attends inside each image. With
 * {@link #visionTrained} false (a frozen vision tower, qwen-vl-finetune's {@code tune_mm_vision=False}) the vision
 * terms are the forward pass only: 2 and 4 instead of 6 and 12.
 *
 * <p>Parameters counted: the weights of matrix multiplies that each token (patch) goes through. For the LLM, each
 * layer's q, k, v, o projections ({@code hidden·headDim·(2·heads + 2·kvHeads)}) and its gated MLP
 * ({@code 3·hidden·intermediate}), plus the output head {@code hidden·vocab} (computed for every token whether or not
 * it is tied to the embedding); not the embedding lookup, biases or norms, which do no matrix multiply. For the ViT,
 * each block's qkv and projection ({@code 4·e²}) and its MLP ({@code 2·e·ff}, or {@code 3·e·ff} for Qwen2.5-VL's gated
 * one), the patch embedding ({@code 3·temporal·patch²·e}), and the patch merger(s) divided by {@code merge²}
 * (a merger runs once per merged token; Qwen3-VL has three DeepStack mergers besides the main one).
 *
 * <p>What it ignores: Qwen2.5-VL's windowed ViT attention (28 of its 32 layers attend inside 8×8-patch windows, a cost
 * linear in P, left out; only its 4 full-attention layers, {@code fullatt_block_indexes}, make the quadratic term);
 * element-wise work (norms, activations, rotary embedding, Qwen3-VL's interpolated position embedding), the loss,
 * the optimizer step (per step, not per sample), and kernel efficiency, which differs between a long and a short
 * sequence. Constants are FLOPs; only their ratios matter to the planner.
 *
 * <p>Defaults: the smallest published model of each family, from its {@code config.json} on the Hugging Face Hub
 * (docs/packing.md gives the values and where they come from): {@link #QWEN2_VL_2B}, {@link #QWEN2_5_VL_3B},
 * {@link #QWEN3_VL_2B}; {@link #fromModelFolder} computes the same from a model folder.
 *
 * @param llmParams          matrix-multiply weights each LLM token goes through
 * @param llmLayers          decoder layers
 * @param llmAttentionWidth  attention heads × head dimension
 * @param vitParams          matrix-multiply weights each vision patch goes through (mergers per merged token / merge²)
 * @param vitAttentionLayers ViT layers with full attention over the image
 * @param vitHidden          ViT hidden size (its heads × head dimension)
 * @param visionTrained      whether the vision tower is trained (backward pass counted)
 */
public record PackCost(double llmParams, int llmLayers, int llmAttentionWidth, double vitParams, int vitAttentionLayers,
                       int vitHidden, boolean visionTrained) {
    /** Qwen2-VL-2B: LLM hidden 1536, 28 layers, 12 heads (2 KV) of 128, MLP 8960, vocab 151936; ViT 32 × 1280, MLP 4×. */
    public static final PackCost QWEN2_VL_2B = new PackCost(
            llmParams(1536, 28, 12, 2, 128, 8960, 151936), 28, 12 * 128,
            vitParams(1280, 32, 2 * 1280 * 5120L, 14, 2, 2, 1536, 1), 32, 1280, true);
    /** Qwen2.5-VL-3B: LLM hidden 2048, 36 layers, 16 heads (2 KV) of 128, MLP 11008, vocab 151936; ViT 32 × 1280, gated MLP 3420, 4 full-attention layers. */
    public static final PackCost QWEN2_5_VL_3B = new PackCost(
            llmParams(2048, 36, 16, 2, 128, 11008, 151936), 36, 16 * 128,
            vitParams(1280, 32, 3 * 1280 * 3420L, 14, 2, 2, 2048, 1), 4, 1280, true);
    /** Qwen3-VL-2B: LLM hidden 2048, 28 layers, 16 heads (8 KV) of 128, MLP 6144, vocab 151936; ViT 24 × 1024, MLP 4096, 3 DeepStack mergers. */
    public static final PackCost QWEN3_VL_2B = new PackCost(
            llmParams(2048, 28, 16, 8, 128, 6144, 151936), 28, 16 * 128,
            vitParams(1024, 24, 2 * 1024 * 4096L, 16, 2, 2, 2048, 4), 24, 1024, true);

    private static final long MAX_CONFIG_BYTES = 16L << 20;
    private static final ObjectMapper JSON = new ObjectMapper();

    public PackCost {
        if (!(llmParams >= 0) || Double.isInfinite(llmParams) || !(vitParams >= 0) || Double.isInfinite(vitParams))
            throw new IllegalArgumentException("cost model: parameter counts must be finite and >= 0, got " + llmParams + " and " + vitParams);
        if (llmLayers < 0 || llmAttentionWidth < 0 || vitAttentionLayers < 0 || vitHidden < 0)
            throw new IllegalArgumentException("cost model: layer counts and widths must be >= 0");
    }

    /** One line for logs: "LLM 1.54e9 weights, 28 layers × 1536; ViT 6.39e8 weights, 32 × 1280, trained". */
    public String describe() {
        return String.format(java.util.Locale.ROOT, "LLM %.3g weights, %d layers × %d; ViT %.3g weights, %d × %d, %s", llmParams, llmLayers,
                llmAttentionWidth, vitParams, vitAttentionLayers, vitHidden, visionTrained ? "trained" : "frozen");
    }

    /** The default of a model family: its smallest published model. */
    public static PackCost forFamily(ProcessorPreset family) {
        return switch (family) {
            case QWEN2_VL -> QWEN2_VL_2B;
            case QWEN2_5_VL -> QWEN2_5_VL_3B;
            case QWEN3_VL -> QWEN3_VL_2B;
            // an audio family is priced by its vision family's model (NodeConfig.packCost asks for processor().visionFamily():
            // Qwen2.5-Omni's thinker is Qwen2.5-VL-3B's LLM and ViT; its audio tokens are priced as text, docs/packing.md §4)
            case QWEN2_AUDIO, QWEN2_5_OMNI, QWEN3_OMNI -> throw new IllegalArgumentException("no pack cost model of its own for " + family
                    + ": ask for its vision family's (ProcessorPreset.visionFamily)");
        };
    }

    /** This model with the vision tower trained or frozen. */
    public PackCost withVisionTrained(boolean trained) {
        return new PackCost(llmParams, llmLayers, llmAttentionWidth, vitParams, vitAttentionLayers, vitHidden, trained);
    }

    /** FLOPs of the LLM over one segment of {@code tokens} tokens. */
    public double tokenFlops(int tokens) {
        double l = tokens;
        return 6 * llmParams * l + 6.0 * llmLayers * llmAttentionWidth * l * l;
    }

    /** FLOPs of the vision tower over one image of {@code patches} patches. */
    public double imageFlops(int patches) {
        double p = patches;
        double f = visionTrained ? 1 : 1.0 / 3;
        return f * (6 * vitParams * p + 12.0 * vitAttentionLayers * vitHidden * p * p);
    }

    /**
     * FLOPs of the vision tower over one video of {@code patches} patches ({@code t·h·w}) in {@code groups} temporal
     * groups ({@code t}): the weights over every patch, and full attention inside each group of {@code h·w} patches
     * (the vision tower's {@code cu_seqlens} has one segment per temporal group: transformers 5.18.0,
     * {@code vision_utils.get_vision_cu_seqlens}), so {@code t·(h·w)² = P²/t}. An image is a video of one group.
     */
    public double videoFlops(int patches, int groups) {
        if (groups < 1) throw new IllegalArgumentException("a video has at least one temporal group, got " + groups);
        double p = patches;
        double f = visionTrained ? 1 : 1.0 / 3;
        return f * (6 * vitParams * p + 12.0 * vitAttentionLayers * vitHidden * p * (p / groups));
    }

    /** FLOPs of a sample: its tokens as one segment, each of its images and each of its videos. */
    public double flops(SampleShape s) {
        double c = tokenFlops(s.tokens());
        for (int i = 0, n = s.images(); i < n; i++) c += imageFlops(s.imagePatches(i));
        for (int i = 0, n = s.videos(); i < n; i++) c += videoFlops(s.videoPatches(i), s.videoGroups(i));
        return c;
    }

    /**
     * The cost model of the model in folder {@code dir}, computed from its {@code config.json} as the defaults are
     * (fields a published config leaves to the config class's defaults — Qwen2-VL's vision depth, width and MLP ratio,
     * Qwen2.5-VL's vision depth, MLP width and full-attention layers — take those defaults).
     *
     * @throws ModelFolderException naming the file and field that is missing or not a Qwen-VL model's
     */
    public static PackCost fromModelFolder(Path dir) {
        Path file = dir.resolve(ModelFolder.CONFIG);
        JsonNode config;
        try {
            if (Files.size(file) > MAX_CONFIG_BYTES) throw new ModelFolderException(file + ": larger than " + MAX_CONFIG_BYTES + " bytes");
            config = JSON.readTree(file.toFile());
        } catch (NoSuchFileException e) {
            throw new ModelFolderException(file + ": missing");
        } catch (IOException e) {
            throw new ModelFolderException(file + ": unreadable (" + e.getMessage() + ")");
        }
        return fromConfig(config, file.toString());
    }

    /** The cost model of a parsed {@code config.json}; {@code where} names it in errors. */
    public static PackCost fromConfig(JsonNode config, String where) {
        if (config == null || !config.isObject()) throw new ModelFolderException(where + ": not a JSON object");
        String type = config.path("model_type").asText("");
        if (!ModelFolder.MODEL_TYPES.containsKey(type))
            throw new ModelFolderException(where + ": field model_type is '" + type + "', not a Qwen-VL model (qwen2_vl, qwen2_5_vl, qwen3_vl)");
        JsonNode text = config.has("text_config") && config.get("text_config").isObject() ? config.get("text_config") : config;
        JsonNode vision = config.path("vision_config");
        int hidden = field(where, text, "hidden_size", -1);
        int layers = field(where, text, "num_hidden_layers", -1);
        int heads = field(where, text, "num_attention_heads", -1);
        int kvHeads = field(where, text, "num_key_value_heads", heads);
        int headDim = field(where, text, "head_dim", hidden / heads);
        int ff = field(where, text, "intermediate_size", -1);
        int vocab = field(where, text.has("vocab_size") ? text : config, "vocab_size", -1);
        double llm = llmParams(hidden, layers, heads, kvHeads, headDim, ff, vocab);
        int patch = field(where, vision, "patch_size", field(where, vision, "spatial_patch_size", type.startsWith("qwen3") ? 16 : 14));
        int temporal = field(where, vision, "temporal_patch_size", 2);
        int merge = field(where, vision, "spatial_merge_size", 2);
        return switch (type) {
            case "qwen2_vl" -> {
                // Qwen2VLVisionConfig defaults: depth 32, embed_dim 1280, mlp_ratio 4; hidden_size is the merger's output.
                int e = field(where, vision, "embed_dim", 1280);
                int depth = field(where, vision, "depth", 32);
                double ratio = vision.has("mlp_ratio") ? vision.get("mlp_ratio").asDouble() : 4;
                long mlp = 2L * e * Math.round(e * ratio);
                int out = field(where, vision, "hidden_size", hidden);
                yield new PackCost(llm, layers, heads * headDim, vitParams(e, depth, mlp, patch, temporal, merge, out, 1), depth, e, true);
            }
            case "qwen2_5_vl" -> {
                // Qwen2_5_VLVisionConfig defaults: depth 32, intermediate_size 3420, fullatt_block_indexes [7, 15, 23, 31].
                int e = field(where, vision, "hidden_size", 1280);
                int depth = field(where, vision, "depth", 32);
                int vff = field(where, vision, "intermediate_size", 3420);
                int out = field(where, vision, "out_hidden_size", hidden);
                JsonNode full = vision.get("fullatt_block_indexes");
                int fullLayers = full != null && full.isArray() ? full.size() : 4;
                yield new PackCost(llm, layers, heads * headDim, vitParams(e, depth, 3L * e * vff, patch, temporal, merge, out, 1), fullLayers, e, true);
            }
            case "qwen3_vl", "qwen3_vl_moe" -> {
                int e = field(where, vision, "hidden_size", -1);
                int depth = field(where, vision, "depth", -1);
                int vff = field(where, vision, "intermediate_size", -1);
                int out = field(where, vision, "out_hidden_size", hidden);
                JsonNode deep = vision.get("deepstack_visual_indexes");
                int mergers = 1 + (deep != null && deep.isArray() ? deep.size() : 0);
                yield new PackCost(llm, layers, heads * headDim, vitParams(e, depth, 2L * e * vff, patch, temporal, merge, out, mergers), depth, e, true);
            }
            default -> throw new IllegalStateException("model type " + type + " has no cost model");
        };
    }

    /** LLM matmul weights per token: q, k, v, o and the gated MLP of each layer, and the output head. */
    static double llmParams(long hidden, long layers, long heads, long kvHeads, long headDim, long intermediate, long vocab) {
        long attention = hidden * headDim * (2 * heads + 2 * kvHeads);
        long mlp = 3 * hidden * intermediate;
        return (double) layers * (attention + mlp) + (double) hidden * vocab;
    }

    /**
     * ViT matmul weights per patch: each block's qkv and projection ({@code 4·e²}) and MLP ({@code mlpWeights}), the
     * patch embedding, and {@code mergers} mergers ({@code 4e·4e + 4e·out} each for merge 2) over {@code merge²}
     * patches.
     */
    static double vitParams(long e, long depth, long mlpWeights, long patch, long temporal, long merge, long out, int mergers) {
        long block = 4 * e * e + mlpWeights;
        long embed = 3 * temporal * patch * patch * e;
        long mergedWidth = e * merge * merge;
        long merger = mergedWidth * mergedWidth + mergedWidth * out;
        return (double) depth * block + embed + (double) mergers * merger / (merge * merge);
    }

    private static int field(String where, JsonNode node, String name, int fallback) {
        JsonNode v = node == null ? null : node.get(name);
        if (v == null || v.isNull()) {
            if (fallback < 0) throw new ModelFolderException(where + ": field " + name + " is missing (the cost model needs it)");
            return fallback;
        }
        if (!v.canConvertToInt() || v.asInt() <= 0)
            throw new ModelFolderException(where + ": field " + name + " is " + v + ", not a positive integer");
        return v.asInt();
    }
}
