"""Hugging Face model folders without weights, as stoker-testkit's ModelFolders.java writes them (stdlib only).

config.json and preprocessor_config.json are the published ones of each family's Instruct model (Qwen/Qwen2-VL-7B-Instruct,
Qwen/Qwen2.5-VL-7B-Instruct, Qwen/Qwen3-VL-8B-Instruct), trimmed to what a processor reads; tokenizer.json is the
tokenizer bundled with stoker-text; chat_template.json holds the family's published chat template from
stoker-testkit/src/main/resources/dev/stoker/testkit/templates. Keep in step with ModelFolders.java.
"""
import gzip
import json
import os
import shutil

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUNDLED_TOKENIZER = os.path.join(ROOT, "stoker-text/src/main/resources/dev/stoker/text/qwen2/tokenizer.json.gz")
TEMPLATES = os.path.join(ROOT, "stoker-testkit/src/main/resources/dev/stoker/testkit/templates")
FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HALF = [0.5, 0.5, 0.5]


def config(family):
    if family == "qwen2-vl":
        return {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
                "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
                "image_token_id": 151655, "video_token_id": 151656, "transformers_version": "4.41.2",
                "vision_config": {"depth": 32, "embed_dim": 1280, "patch_size": 14, "spatial_patch_size": 14,
                                  "spatial_merge_size": 2, "temporal_patch_size": 2}}
    if family == "qwen2.5-vl":
        return {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
                "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
                "image_token_id": 151655, "video_token_id": 151656, "transformers_version": "4.49.0",
                "vision_config": {"depth": 32, "hidden_size": 1280, "patch_size": 14, "spatial_merge_size": 2,
                                  "temporal_patch_size": 2, "window_size": 112}}
    if family == "qwen3-vl":
        return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
                "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
                "vision_end_token_id": 151653, "transformers_version": "4.57.0.dev0",
                "vision_config": {"depth": 27, "hidden_size": 1152, "patch_size": 16, "spatial_merge_size": 2,
                                  "temporal_patch_size": 2}}
    raise ValueError("unknown family " + family)


def preprocessor(family):
    three = family == "qwen3-vl"
    p = {}
    if not three:
        p.update(min_pixels=3136, max_pixels=12845056)
    else:
        p["size"] = {"longest_edge": 16777216, "shortest_edge": 65536}
    p.update(patch_size=16 if three else 14, temporal_patch_size=2, merge_size=2,
             image_mean=HALF if three else CLIP_MEAN, image_std=HALF if three else CLIP_STD)
    if three:
        p.update(do_resize=True, do_rescale=True, do_normalize=True, do_convert_rgb=True, do_center_crop=None,
                 resample=3, rescale_factor=0.00392156862745098, data_format="channels_first",
                 processor_class="Qwen3VLProcessor", image_processor_type="Qwen2VLImageProcessorFast")
    else:
        p.update(image_processor_type="Qwen2VLImageProcessor",
                 processor_class="Qwen2VLProcessor" if family == "qwen2-vl" else "Qwen2_5_VLProcessor")
    return p


def published_template(family):
    with open(os.path.join(TEMPLATES, family + "-instruct.jinja"), encoding="utf-8") as f:
        return f.read()


def write(directory, family, chat_template=True, slow_tokenizer_files=True):
    """Writes the folder of family into directory, with the published chat template unless chat_template is False.

    slow_tokenizer_files: also vocab.json, merges.txt (from tokenizer.json's BPE model) and the added tokens in
    tokenizer_config.json's added_tokens_decoder, as the Hub folders carry them. ModelFolders.java writes neither: Stoker
    reads tokenizer.json only. transformers 4.57's AutoProcessor.from_pretrained(DIR, use_fast=False) passes use_fast to
    the tokenizer as well, and the slow Qwen2Tokenizer is built from these files (without them it fails to load).
    """
    os.makedirs(directory, exist_ok=True)
    _json(os.path.join(directory, "config.json"), config(family))
    _json(os.path.join(directory, "preprocessor_config.json"), preprocessor(family))
    tokenizer_config = {"model_max_length": 32768, "pad_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                        "tokenizer_class": "Qwen2Tokenizer"}
    with gzip.open(BUNDLED_TOKENIZER, "rb") as src, open(os.path.join(directory, "tokenizer.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    if slow_tokenizer_files:
        with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        _json(os.path.join(directory, "vocab.json"), tok["model"]["vocab"])
        with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for m in tok["model"]["merges"]:
                f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
        tokenizer_config["added_tokens_decoder"] = {
            str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in tok["added_tokens"]}
    _json(os.path.join(directory, "tokenizer_config.json"), tokenizer_config)
    if chat_template:
        _json(os.path.join(directory, "chat_template.json"), {"chat_template": published_template(family)})
    return directory


def _json(path, tree):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tree, f, indent=2, ensure_ascii=False)
