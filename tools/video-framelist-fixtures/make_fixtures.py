"""Fixtures for frame lists as videos (issue 29, Build item 2): a video given as a list of frame images, run through a
port of qwen-vl-utils' fetch_video list branch and the real transformers video processor, written where the Java tests
read them (stoker-encode/src/test/resources/dev/stoker/encode/video/framelist/). Run once with a venv holding
transformers 5.18.0, torch 2.13.0+cpu, torchvision 0.28.0, Pillow and NumPy (the offline mirror's):

    /work/venv-framelists/bin/python tools/video-framelist-fixtures/make_fixtures.py       # transformers 5.18.0
    /work/venv-framelists-457/bin/python tools/video-framelist-fixtures/make_fixtures.py   # then 4.57.6

With 5.18.0 it writes every fixture. With 4.57.6 (installed as tools/hf-check/make_venvs.sh does: huggingface-hub pin
relaxed, torchvision's meta registrations guarded) it checks that 4.57.6 gives the same pixel_values_videos and
video_grid_thw bit for bit, and writes each case's `expected-4.57.json` (4.57's second_per_grid_ts = 2 / the `fps`
qwen-vl-utils passes, which is sample_fps; its Qwen3 prompt and timestamps).

Reference ported (read, not copied): qwen-vl-utils' `fetch_video`, the `else:` branch for a list or tuple of frames,
and `fetch_image`/`smart_resize`/`to_rgb`, as in QwenLM/Qwen3-VL qwen-vl-utils/src/qwen_vl_utils/vision_process.py at
commit 004d5e0a0d4514ce8945356ae8c969f4dc0080dc (the list branch is the same in 0.0.14, which the video vectors pin):
  1. every frame through fetch_image with the item's keys (min_pixels/max_pixels with the IMAGE defaults 4·f² and
     16384·f², or resized_height+resized_width through smart_resize with those defaults), PIL `Image.resize` at its
     default resample (BICUBIC);
  2. the list padded to a multiple of FRAME_FACTOR (2) by repeating the last frame;
  3. sample_fps = item's `sample_fps` (2.0); metadata fps = item's `raw_fps` (= sample_fps), frames_indices =
     range(len), total_num_frames = len / sample_fps · raw_fps;
  4. the video-level smart_resize (min 128·f², max min(768·f², total_pixels/n·2) raised to int(min·1.05), an item's
     max_pixels only lowering it; resized_height/width if given) and torchvision v1 resize (float32 antialiased bicubic,
     clamp, round) on the stacked uint8 frames.
Then the family's processor from transformers with `do_sample_frames=False, do_resize=False` (as the video vectors'
qwen-vl-utils cases and the Qwen3-VL README run it) and the metadata of step 3: pixel_values_videos, video_grid_thw,
second_per_grid_ts (Qwen2.5-VL) and the <t seconds> texts (Qwen3-VL) are what the fixtures hold.

The frames themselves are made here (seeded NumPy, PNG and JPEG via Pillow) and stored beside the expected arrays, so
the Java tests need neither Python nor ../shared.
"""
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "stoker-encode/src/test/resources/dev/stoker/encode/video/framelist")
sys.path.insert(0, os.path.join(ROOT, "tools", "hf-check"))
import model_folders  # noqa: E402

PATCH = {"qwen2-vl": 14, "qwen2.5-vl": 14, "qwen3-vl": 16}


# ---- the port of qwen-vl-utils (see the docstring) -------------------------------------------------------------
def smart_resize(h, w, factor, min_pixels=None, max_pixels=None):
    max_pixels = max_pixels if max_pixels is not None else 16384 * factor ** 2
    min_pixels = min_pixels if min_pixels is not None else 4 * factor ** 2
    assert max_pixels >= min_pixels
    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio")
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb = math.floor(h / beta / factor) * factor
        wb = math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def frame_image(path, ele, factor):
    img = Image.open(path)
    assert img.mode != "RGBA", "Stoker refuses RGBA frames (to_rgb composites them over white)"
    img = img.convert("RGB")
    if "resized_height" in ele and "resized_width" in ele:
        rh, rw = smart_resize(ele["resized_height"], ele["resized_width"], factor)
    else:
        w, h = img.size
        rh, rw = smart_resize(h, w, factor, ele.get("min_pixels", 4 * factor ** 2), ele.get("max_pixels", 16384 * factor ** 2))
    return img.resize((rw, rh))


def fetch_frame_list(paths, ele, factor):
    images = [frame_image(p, ele, factor) for p in paths]
    n = math.ceil(len(images) / 2) * 2
    images += [images[-1]] * (n - len(images))
    sample_fps = ele.get("sample_fps", 2.0)
    raw_fps = ele.get("raw_fps", sample_fps)
    video = torch.stack([torch.from_numpy(np.array(i).transpose(2, 0, 1)) for i in images])
    meta = dict(fps=raw_fps, frames_indices=list(range(len(video))), total_num_frames=(n / sample_fps) * raw_fps)
    _, _, h, w = video.shape
    min_px = ele.get("min_pixels", 128 * factor * factor)
    total_px = ele.get("total_pixels", 128000 * factor * factor * 0.9)
    max_px = max(min(768 * factor * factor, total_px / n * 2), int(min_px * 1.05))
    max_px = min(ele.get("max_pixels", max_px), max_px)
    if "resized_height" in ele and "resized_width" in ele:
        rh, rw = smart_resize(ele["resized_height"], ele["resized_width"], factor)
    else:
        rh, rw = smart_resize(h, w, factor, min_px, max_px)
    video = TF.resize(video, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True).float()
    return video, meta, sample_fps, (h, w)


# ---- the cases ---------------------------------------------------------------------------------------------------
CASES = [
    # odd count (3 → 4, the last repeated); Pillow 80x60 → 84x56, then the video budget → 56x28 (a real float resize)
    dict(name="f1_qwen25_png_odd", family="qwen2.5-vl", fmt="png", count=3, size=(80, 60),
         item={"min_pixels": 784, "total_pixels": 4704, "sample_fps": 1.5}),
    # resized_height/width through both smart_resizes (image defaults raise 40x72 to 64x96), raw_fps → timestamps
    dict(name="f2_qwen3_jpeg_resized", family="qwen3-vl", fmt="jpeg", count=4, size=(70, 45),
         item={"resized_height": 40, "resized_width": 72, "sample_fps": 2.0, "raw_fps": 4.0}),
    # defaults only but min_pixels: one frame, padded to two; Qwen2-VL
    dict(name="f3_qwen2_png_one", family="qwen2-vl", fmt="png", count=1, size=(57, 43), item={"min_pixels": 3136,
                                                                                             "max_pixels": 3136}),
]


def frames(case):
    rng = np.random.RandomState(abs(hash(case["name"])) % 2**31 if False else sum(map(ord, case["name"])))
    w, h = case["size"]
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for k in range(case["count"]):
        base = np.stack([(xx * 255 // max(w - 1, 1) + 40 * k) % 256, (yy * 255 // max(h - 1, 1)) % 256,
                         ((xx + yy + 17 * k) * 3) % 256], axis=-1)
        noise = rng.randint(-30, 31, size=base.shape)
        out.append(np.clip(base + noise, 0, 255).astype(np.uint8))
    return out


def processor(family, tmp):
    d = os.path.join(tmp, family)
    model_folders.write(d, family)
    from transformers import AutoProcessor
    auto = AutoProcessor.from_pretrained(d)
    if family == "qwen3-vl":
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor as VP
    else:
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor as VP
    return type(auto)(image_processor=auto.image_processor, tokenizer=auto.tokenizer, video_processor=VP(),
                      chat_template=auto.chat_template)


def main():
    from transformers.video_utils import VideoMetadata
    release = transformers.__version__
    assert release in ("5.18.0", "4.57.6"), release
    new = release == "5.18.0"
    if new:
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
    tmp = tempfile.mkdtemp()
    index = []
    for case in CASES:
        d = os.path.join(OUT, case["name"])
        os.makedirs(d, exist_ok=True)
        names = []
        for k, rgb in enumerate(frames(case)):
            name = f"frame{k}.{'png' if case['fmt'] == 'png' else 'jpg'}"
            if not new:
                pass  # 4.57.6 reads the frames 5.18.0's run wrote
            elif case["fmt"] == "png":
                Image.fromarray(rgb).save(os.path.join(d, name))
            else:
                Image.fromarray(rgb).save(os.path.join(d, name), quality=90)
            names.append(name)
        family = case["family"]
        factor = PATCH[family] * 2
        video, meta, sample_fps, pil_hw = fetch_frame_list([os.path.join(d, n) for n in names], case["item"], factor)
        proc = processor(family, tmp)
        md = VideoMetadata(total_num_frames=meta["total_num_frames"], fps=meta["fps"],
                           frames_indices=meta["frames_indices"], width=int(video.shape[3]), height=int(video.shape[2]))
        text = "<|vision_start|><|video_pad|><|vision_end|>"
        # 4.57's Qwen2.5 reads second_per_grid_ts from the fps kwarg qwen-vl-utils passes ([sample_fps]); 5.18 from metadata
        kw = {} if new else {"fps": [sample_fps]}
        out = proc(text=[text], videos=[video], video_metadata=[md], do_sample_frames=False, do_resize=False,
                   return_tensors="pt", **kw)
        pv = out["pixel_values_videos"].numpy().astype(np.float32)
        grid = out["video_grid_thw"].numpy().astype(np.int64)
        if new:
            np.save(os.path.join(d, "pixel_values_videos.npy"), pv)
            np.save(os.path.join(d, "video_grid_thw.npy"), grid)
        else:
            assert np.array_equal(np.load(os.path.join(d, "pixel_values_videos.npy")).view(np.uint32), pv.view(np.uint32)), name
            assert np.array_equal(np.load(os.path.join(d, "video_grid_thw.npy")), grid), name
        expect = dict(family=family, frames=names, item=case["item"], pillow_hw=list(pil_hw),
                      resized_hw=[int(video.shape[2]), int(video.shape[3])], padded_frames=int(video.shape[0]),
                      frame_indices=meta["frames_indices"], sample_fps=sample_fps)
        if "second_per_grid_ts" in out:
            spg = np.asarray(out["second_per_grid_ts"], dtype=np.float32)
            if new:
                np.save(os.path.join(d, "second_per_grid_ts.npy"), spg)
            expect["second_per_grid_ts"] = [float(x) for x in spg]
        decoded = proc.tokenizer.decode(out["input_ids"][0])
        expect["timestamps"] = re.findall(r"<[0-9.]+ seconds>", decoded)
        expect["video_tokens"] = int((out["input_ids"][0] == 151656).sum())
        expect["transformers"] = release
        with open(os.path.join(d, "expected.json" if new else "expected-4.57.json"), "w") as f:
            json.dump(expect, f, indent=1)
        index.append(case["name"])
        print(case["name"], grid.tolist(), pv.shape, expect.get("second_per_grid_ts"), expect["timestamps"])
    if new:
        with open(os.path.join(OUT, "cases.txt"), "w") as f:
            f.write("\n".join(index) + "\n")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
