#!/usr/bin/python3
"""Conformance cases at Hugging Face's published processor bounds (the presets' defaults since 2026-12).

The shared vectors (../qwen-vl) were made at the processor class's constructor bounds (56^2 ... 28^2*1280);
these cases are the same images and chats, plus large photos, at each family's published bounds:
qwen2_5vl_hub (3,136 ... 12,845,056 pixels, patch 14; Qwen2-VL's Hub config has the same) and qwen3vl_hub
(65,536 ... 16,777,216, patch 16). The arrays are large (a 12.8-Mpixel image is 308 MB of pixel_values), so
manifest.json keeps their shapes and the sha256 of their raw little-endian bytes, not the arrays.

Made with the development tree's reference implementation (../shared/reference/ref_qwenvl.py, numpy + Pillow):

    /usr/bin/python3 testdata/qwen-vl-hub/make_cases.py ../shared

Inputs: the shared vectors' images (testdata/qwen-vl/images), a photo of the bundled demo set
(assets/photos, 1600 x 1082) and one 15.9-Mpixel photo kept here (images/, CC0, see LICENSES.tsv).
"""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared"), "reference"))
import ref_qwenvl as ref  # noqa: E402

SETTINGS = {"qwen2_5vl": "qwen2_5vl_hub", "qwen3vl": "qwen3vl_hub"}

# The image that older transformers refused (a side under the factor), at the shared vectors' settings too: their
# expected error is what the spec's older code did, and these outputs are what current releases give instead.
EXTRA_SETTINGS = {"p02_tiny_20x30": ["qwen2vl_p14", "qwen3vl_p16"]}


def current_smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    """smart_resize as transformers 4.57.6 and 5.18.0 have it (models/qwen2_vl/image_processing_qwen2_vl.py and
    image_processing_pil_qwen2_vl.py): no check of a side under the factor (an image that small is resized up to
    min_pixels), and the shrinking branch keeps each side at least one factor. The reference implementation follows
    the older code, which raised for a side under the factor; every other image resizes the same under both."""
    import math
    if max(height, width) / min(height, width) > 200:
        raise ref.SmartResizeError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = ref.py_round(height / factor) * factor
    w_bar = ref.py_round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


ref.smart_resize = current_smart_resize


def image_path(name):
    for d in (os.path.join(HERE, "images"), os.path.join(ROOT, "testdata", "qwen-vl", "images"), os.path.join(ROOT, "assets", "photos")):
        for f in sorted(os.listdir(d)):
            if os.path.splitext(f)[0] == name:
                return os.path.join(d, f)
    raise SystemExit("no image " + name)


def digest(a, dtype):
    return hashlib.sha256(np.ascontiguousarray(a, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()).hexdigest()


IMAGES = ["p01_photo_grace_hopper", "p02_tiny_20x30", "p03_small_40x36", "p04_wide_2000x200", "p05_gray_L_320x240",
          "p06_rgba_alpha_300x200", "p07_halfround_400x294", "p08_exact_448x448",
          "lomiri16__Picture_0B_by_freespace", "lomiri16__seeding_by_Clements_Engelhardt"]

CHATS = [
    dict(id="h01_vqa_large_photo", description="One user turn with the 15.9-Mpixel photo (over Qwen2.5-VL's cap, under Qwen3-VL's).",
         messages=[{"role": "user", "content": [{"type": "image", "image": "lomiri16__seeding_by_Clements_Engelhardt"},
                                                  {"type": "text", "text": "What grows here?"}]},
                   {"role": "assistant", "content": "Young plants in rows of dark soil."}]),
    dict(id="h02_two_photos_and_text", description="A system prompt, the 1600 x 1082 photo and a small one in two turns.",
         messages=[{"role": "system", "content": "You are a careful describer of pictures."},
                   {"role": "user", "content": [{"type": "image", "image": "lomiri16__Picture_0B_by_freespace"},
                                                  {"type": "text", "text": "Describe it."}]},
                   {"role": "assistant", "content": "Soft light over an open landscape."},
                   {"role": "user", "content": [{"type": "text", "text": "And this one: "},
                                                  {"type": "image", "image": "p07_halfround_400x294"}]},
                   {"role": "assistant", "content": "A synthetic test pattern."}]),
]


def main():
    tok = ref.QwenTokenizer()
    out = {"generator": "make_cases.py + ../shared/reference/ref_qwenvl.py (numpy %s), smart_resize as transformers "
                        "4.57.6 and 5.18.0 have it" % np.__version__,
           "semantics": "as ../qwen-vl: HF Qwen2VLImageProcessor slow/PIL path, PIL.Image.open without EXIF transpose",
           "settings": {s: ref.SETTINGS[s] for s in list(SETTINGS.values()) + ["qwen2vl_p14", "qwen3vl_p16"]},
           "digest": "sha256 of the raw little-endian bytes of each array in C order",
           "image_cases": [], "chat_cases": []}
    cache = {}
    for name in IMAGES:
        case = {"id": name, "file": os.path.relpath(image_path(name), ROOT), "outputs": {}}
        for setting in list(SETTINGS.values()) + EXTRA_SETTINGS.get(name, []):
            try:
                pv, thw = ref.preprocess_image(image_path(name), setting)
            except ref.SmartResizeError as e:  # a side under the factor: the processor's own error
                case["outputs"][setting] = {"expected_error": str(e)}
                print(name, setting, e, flush=True)
                continue
            cache[(name, setting)] = (pv, thw)
            case["outputs"][setting] = {"pixel_values_shape": list(pv.shape), "image_grid_thw": thw.tolist(),
                                        "pixel_values_sha256": digest(pv, "float32")}
            print(name, setting, pv.shape, thw.tolist(), flush=True)
        out["image_cases"].append(case)
    for chat in CHATS:
        case = {"id": chat["id"], "description": chat["description"], "messages": chat["messages"], "outputs": {}}
        images = [it["image"] for m in chat["messages"] if isinstance(m["content"], list) for it in m["content"] if it["type"] == "image"]
        case["images_used"] = images
        for family, setting in SETTINGS.items():
            render = ref.render_qwen2vl if family == "qwen2_5vl" else ref.render_qwen3vl
            text = render(chat["messages"], add_generation_prompt=False)
            thws = [cache[(i, setting)][1] for i in images]
            merge = ref.SETTINGS[setting]["merge_size"]
            ids = tok.encode(ref.expand_image_pads(text, thws, merge))
            labels = ref.labels_official(ids)
            pos, delta = ref.get_rope_index(ids, thws, merge)
            pv = np.concatenate([cache[(i, setting)][0] for i in images], 0)
            case["outputs"][family] = {
                "image_setting": setting, "seq_len": len(ids), "image_grid_thw": [t.tolist() for t in thws],
                "input_ids_sha256": digest(ids, "int64"), "labels_sha256": digest(labels, "int64"),
                "position_ids_shape": list(np.asarray(pos).shape), "position_ids_sha256": digest(pos, "int64"),
                "pixel_values_shape": list(pv.shape), "pixel_values_sha256": digest(pv, "float32"),
                "num_supervised": int(sum(1 for x in labels if x != -100)), "rope_delta": int(delta)}
            print(chat["id"], family, len(ids), [t.tolist() for t in thws], flush=True)
        out["chat_cases"].append(case)
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
