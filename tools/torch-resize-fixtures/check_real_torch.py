#!/usr/bin/env python3
"""Checks the numpy reference kernels (and so Stoker's ports, which the fixtures tie to them) against the REAL
torch / torchvision on this CPU. Needs a venv with torch 2.13.0+cpu and torchvision 0.28.0 (not the product, not
the tests):
    /work/venv-kernels/bin/python tools/torch-resize-fixtures/check_real_torch.py [--cases N] [--capability default]
It compares, on the cases of make_fixtures.py plus N random size pairs (results and the two torch defects it
sets apart: README.md beside this file):
  torchvision.transforms.v2.functional.resize(uint8 CHW, BICUBIC, antialias=True)   vs resize_u8_torch
  torchvision.transforms.functional.resize (v1) on the same uint8 tensor              vs resize_tv1_u8(cpu=capability)
  torch.nn.functional.interpolate(float32, bicubic, antialias=True)                  vs resize_f32_torch(cpu=capability)
where capability = torch.backends.cpu.get_cpu_capability() (set ATEN_CPU_CAPABILITY=default to test that build),
and the fused normalize + patchify against transformers' Qwen2VLVideoProcessor when transformers is installed.
"""
import argparse
import os
import random
import sys

import numpy as np
import torch
import torchvision
import torchvision.transforms.functional as F1
import torchvision.transforms.v2.functional as F2
from torchvision.transforms import InterpolationMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as MF  # noqa: E402
V = MF.V


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=150)
    ap.add_argument("--photos", type=int, default=6, help="photos of ../shared/photos through Qwen2VLImageProcessor")
    args = ap.parse_args()
    cap = torch.backends.cpu.get_cpu_capability()
    cpu = {"DEFAULT": "default", "NO AVX": "default", "AVX2": "avx2", "AVX512": "avx512"}.get(cap.upper(), cap.lower())
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, cpu capability {cap} -> reference cpu={cpu}")
    rng = random.Random(42)
    cases = [(MF.synthetic_image(7000003 * (n + 1), n % 2, iw, ih), ow, oh)
             for n, (iw, ih, ow, oh) in enumerate(MF.resize_cases())]
    for n in range(args.cases):
        iw, ih = rng.randint(1, 300), rng.randint(1, 300)
        ow, oh = rng.randint(1, 300), rng.randint(1, 300)
        img = (np.random.default_rng(n).integers(0, 256, (ih, iw, 3), dtype=np.uint8) if n % 2 == 0
               else MF.synthetic_image(n, 1, iw, ih))
        cases.append((img, ow, oh))
    bad = {"u8": 0, "tv1": 0, "f32": 0}
    raised = []
    width_one = []
    for img, ow, oh in cases:
        chw = img.transpose(2, 0, 1).copy()
        t = torch.from_numpy(chw)
        try:
            real_u8 = F2.resize(t, [oh, ow], interpolation=InterpolationMode.BICUBIC, antialias=True).numpy()
        except RuntimeError as e:   # torch 2.13: INTERNAL ASSERT in UpSampleKernelAVXAntialias.h for a 1x1 output
            raised.append(f"{chw.shape[2]}x{chw.shape[1]} -> {ow}x{oh}: {str(e).splitlines()[0][:90]}")
            real_u8 = None
        real_tv1 = F1.resize(t, [oh, ow], interpolation=InterpolationMode.BICUBIC, antialias=True).numpy()
        real_f32 = torch.nn.functional.interpolate(t[None].float(), size=(oh, ow), mode="bicubic", antialias=True,
                                                   align_corners=False)[0].numpy()
        if real_u8 is not None and not np.array_equal(real_u8, V.resize_u8_torch(chw, oh, ow)):
            bad["u8"] += 1
            print(f"   u8 differs: {chw.shape[2]}x{chw.shape[1]} -> {ow}x{oh}, max |d| "
                  f"{np.abs(real_u8.astype(int) - V.resize_u8_torch(chw, oh, ow).astype(int)).max()}")
        width_one_case = ow == 1 and oh != chw.shape[1] and oh > 1 and chw.shape[1] > 1
        if not width_one_case and not np.array_equal(real_tv1, V.resize_tv1_u8(chw, oh, ow, cpu)):
            bad["tv1"] += 1
            print(f"   tv1 differs: {chw.shape[2]}x{chw.shape[1]} -> {ow}x{oh}, max |d| "
                  f"{np.abs(real_tv1.astype(int) - V.resize_tv1_u8(chw, oh, ow, cpu).astype(int)).max()}")
        ref = V.resize_f32_torch(chw, oh, ow, cpu)
        if ow == 1 and oh != chw.shape[1] and oh > 1 and chw.shape[1] > 1:
            # torch 2.13 defect: with an output width of 1 and a height change every output row equals row 0
            if np.array_equal(real_f32, np.repeat(real_f32[:, :1], oh, axis=1)) and np.array_equal(
                    np.where(real_f32[:, 0] == 0, 0, real_f32[:, 0]), np.where(ref[:, 0] == 0, 0, ref[:, 0])):
                width_one.append(f"{chw.shape[2]}x{chw.shape[1]} -> {ow}x{oh}")
                continue
        if (oh, ow) != chw.shape[1:] and not np.array_equal(np.where(real_f32 == 0, 0, real_f32).view(np.uint32),
                                                            np.where(ref == 0, 0, ref).astype(np.float32).view(np.uint32)):
            bad["f32"] += 1
            print(f"   f32 differs: {chw.shape[2]}x{chw.shape[1]} -> {ow}x{oh}, "
                  f"{int((real_f32 != ref).sum())} of {ref.size} values")
    print(f"{len(cases)} size pairs: mismatches {bad}; torch raised on the uint8 kernel for {len(raised)}:")
    for r in raised:
        print("   ", r)
    print(f"float kernel, output width 1 and a height change: torch repeats output row 0 (reference row 0 equal) "
          f"in {len(width_one)}: {width_one}")
    try:
        check_auto_backend()
        if transformers_major() >= 5:
            check_video_processor()
            if args.photos:
                check_image_processor(args.photos)
    except ImportError as e:
        print("transformers not installed, processor checks skipped:", e)
    return 0 if not any(bad.values()) else 1


def transformers_major():
    import transformers
    return int(transformers.__version__.split(".")[0])


# preprocessor_config.json of the Hub's Qwen/Qwen2.5-VL-7B-Instruct (as saved, a slow processor's type)
HUB_PREPROCESSOR = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                    "merge_size": 2, "image_mean": V.OPENAI_CLIP_MEAN, "image_std": V.OPENAI_CLIP_STD,
                    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}


def check_auto_backend():
    """Which class AutoImageProcessor.from_pretrained loads for a Hub Qwen2.5-VL folder (no use_fast/backend), and
    whether it equals the reference's torchvision image path on two photos (max_pixels lowered to 1003520)."""
    import json
    import tempfile
    import transformers
    from PIL import Image
    from transformers import AutoImageProcessor
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as fh:
            json.dump(HUB_PREPROCESSOR, fh)
        proc = AutoImageProcessor.from_pretrained(d)
    photos = os.path.join(MF.REF, "..", "photos")
    exact = 0
    for name in ("opencv__building.jpg", "mate__Garden.jpg"):
        img = Image.open(os.path.join(photos, name)).convert("RGB")
        out = proc(images=[img], max_pixels=1003520, return_tensors="pt") if transformers_major() < 5 else \
            proc(images=[img], size={"shortest_edge": 3136, "longest_edge": 1003520}, return_tensors="pt")
        ref, _ = MF.torchvision_image(np.asarray(img), "qwen2.5-vl", 3136, 1003520)
        pv = out["pixel_values"].numpy()
        exact += pv.shape == ref.shape and np.array_equal(pv.view(np.uint32), ref.view(np.uint32))
    print(f"transformers {transformers.__version__} AutoImageProcessor on a Hub Qwen2.5-VL folder loads "
          f"{type(proc).__name__}; equal to the torchvision reference on {exact}/2 photos")
    tokenizer = os.path.join(MF.REF, "..", "tokenizers", "qwen2")
    if os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
        import shutil
        from transformers import AutoProcessor
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "preprocessor_config.json"), "w") as fh:
                json.dump(HUB_PREPROCESSOR, fh)
            with open(os.path.join(d, "config.json"), "w") as fh:
                json.dump({"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"]}, fh)
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tokenizer, name), d)
            full = AutoProcessor.from_pretrained(d)
        print(f"transformers {transformers.__version__} AutoProcessor on the same folder (+ config.json, tokenizer): "
              f"{type(full).__name__} with {type(full.image_processor).__name__}")


def check_video_processor():
    import transformers
    from transformers import Qwen2VLVideoProcessor
    proc = Qwen2VLVideoProcessor()
    bad = 0
    for n, (t, h, w) in enumerate([(1, 56, 84), (3, 84, 56), (4, 112, 112), (5, 56, 56)]):
        frames = np.stack([MF.synthetic_image(31 * n + k, n % 2, w, h) for k in range(t)])
        out = proc(videos=[torch.from_numpy(frames.transpose(0, 3, 1, 2).copy())], do_resize=False,
                   do_sample_frames=False, return_tensors="pt")
        f = V.FAMILIES["qwen2-vl"]
        x = V.normalize_fused(frames.transpose(0, 3, 1, 2), f["mean"], f["std"])
        pv, _ = V.patchify_video(x, 14, 2, 2)
        if not np.array_equal(out["pixel_values_videos"].numpy().view(np.uint32), pv.view(np.uint32)):
            bad += 1
    print(f"transformers {transformers.__version__} Qwen2VLVideoProcessor normalize+patchify: {4 - bad}/4 bit-exact")


def check_image_processor(count):
    """transformers' torchvision Qwen2VLImageProcessor (5.x default backend) on photos vs make_fixtures.torchvision_image,
    at Qwen2-VL's and Qwen3-VL's settings; also how far the PIL processor is from it."""
    import transformers
    from PIL import Image
    from transformers import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    photos = os.path.join(MF.REF, "..", "photos")
    names = sorted(n for n in os.listdir(photos) if n.lower().endswith((".jpg", ".png")))[:: max(1, 40 // count)][:count]
    exact, total = 0, 0
    for name in names:
        img = Image.open(os.path.join(photos, name)).convert("RGB")
        for fam, lo, hi in (("qwen2-vl", 3136, 1003520), ("qwen3-vl", 65536, 1048576)):
            f = V.FAMILIES[fam]
            kw = dict(size={"shortest_edge": lo, "longest_edge": hi}, patch_size=f["patch_size"], image_mean=f["mean"],
                      image_std=f["std"])
            real = Qwen2VLImageProcessor(**kw)(images=[img], return_tensors="pt")
            pil = Qwen2VLImageProcessorPil(**kw)(images=[img], return_tensors="np")
            ref, grid = MF.torchvision_image(np.asarray(img), fam, lo, hi)
            pv = real["pixel_values"].numpy()
            same = pv.shape == ref.shape and np.array_equal(pv.view(np.uint32), ref.view(np.uint32))
            exact += same
            total += 1
            d = np.abs(pil["pixel_values"] - pv).max() * 255 * max(f["std"])
            print(f"   {name} {fam} {img.size} grid {tuple(real['image_grid_thw'][0].tolist())}: "
                  f"{'bit-exact' if same else 'DIFFERS'}; PIL processor max |diff| ~{d:.1f} levels")
    print(f"transformers {transformers.__version__} Qwen2VLImageProcessor (torchvision) on {total} photo/family pairs: "
          f"{exact} bit-exact")


if __name__ == "__main__":
    sys.exit(main())
