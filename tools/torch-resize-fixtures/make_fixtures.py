#!/usr/bin/python3
"""Writes the fixtures of stoker-image's torch kernels (dev.stoker.image.torch and qwenvl.VideoPatchWriter):

  torch_resize_cases.csv   per case: seed, pattern, in_w, in_h, out_w, out_h, then sha256 of
                           resize_u8_torch (raw HWC u8),
                           resize_tv1_u8 at cpu=default, avx2, avx512 (raw HWC u8),
                           resize_f32_torch at cpu=default, avx2, avx512 (float32 little-endian HWC, -0.0 written as +0.0)
  torchvision_image_cases.csv  per case: an LCG image through transformers' torchvision Qwen2VLImageProcessor as
                           the reference builds it (torchvision_image): grid and sha256 of pixel_values
  video_patchify_cases.csv per case: seed, pattern, family, frames, height, width, sha256 of
                           patchify_video(normalize_fused(frames)) (float32 little-endian, rows x 3*2*p*p)

The inputs are not stored: they are the 64-bit LCG images of testdata/resize/make_resize_cases.py
(synthetic_image: pattern 0 uniform noise, 1 wrapping gradient plus 3-bit noise), which the Java tests
reproduce (BicubicResizerTest.syntheticImage). The expected values come from the numpy reference
../shared/reference/ref_qwenvl_video.py (resize_u8_torch, resize_tv1_u8, resize_f32_torch, normalize_fused,
patchify_video), which is checked against the real torch 2.13.0+cpu / torchvision 0.28.0 by check_real_torch.py.
Run from the repository root with Debian's python (numpy):
    /usr/bin/python3 tools/torch-resize-fixtures/make_fixtures.py
"""
import hashlib
import os
import random
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REF = os.path.join(ROOT, "..", "shared", "reference")
if not os.path.isdir(REF):
    REF = "/work/shared/reference"
sys.path.insert(0, REF)
import ref_qwenvl_video as V  # noqa: E402

OUT = os.path.join(ROOT, "stoker-image", "src", "test", "resources", "dev", "stoker", "image", "torch")
MASK = (1 << 64) - 1
CPUS = ("default", "avx2", "avx512")


def synthetic_image(seed, pattern, w, h):
    """Exactly testdata/resize/make_resize_cases.py synthetic_image, as a (h, w, 3) uint8 array."""
    state = seed & MASK
    out = bytearray(w * h * 3)
    i = 0
    for y in range(h):
        for x in range(w):
            for c in range(3):
                state = (state * 6364136223846793005 + 1442695040888963407) & MASK
                r = state >> 56
                out[i] = r if pattern == 0 else (x * 7 + y * 3 + c * 50 + (r >> 5)) & 0xFF
                i += 1
    return np.frombuffer(bytes(out), np.uint8).reshape(h, w, 3)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def sha_f32(a):
    a = np.ascontiguousarray(a, dtype="<f4").copy()
    a[a == 0] = 0.0      # canonical zero: the reference sums zero-weight taps that aten skips (signed zero only)
    return sha(a)


def resize_cases():
    rng = random.Random(20261206)
    fixed = [(1, 1, 1, 1), (1, 1, 7, 5), (5, 3, 1, 1), (1, 9, 4, 1), (9, 1, 1, 6), (2, 2, 3, 3),
             (400, 3, 3, 40), (3, 300, 200, 2), (64, 64, 64, 32), (64, 64, 32, 64), (37, 41, 37, 41),
             (200, 150, 28, 28), (37, 41, 224, 196), (127, 95, 56, 84), (96, 54, 448, 252), (333, 17, 41, 17),
             (17, 333, 17, 41), (240, 135, 13, 7)]
    cases = list(fixed)
    while len(cases) < 48:
        iw, ih = rng.randint(1, 160), rng.randint(1, 160)
        kind = rng.random()
        if kind < 0.4:     # downscale, up to 9x
            ow, oh = max(1, int(iw / rng.uniform(1, 9))), max(1, int(ih / rng.uniform(1, 9)))
        elif kind < 0.75:  # upscale, up to 4x
            ow, oh = int(iw * rng.uniform(1, 4)) + 1, int(ih * rng.uniform(1, 4)) + 1
        elif kind < 0.9:   # mixed
            ow, oh = rng.randint(1, 200), rng.randint(1, 200)
        else:              # one axis unchanged
            ow, oh = (iw, rng.randint(1, 200)) if rng.random() < 0.5 else (rng.randint(1, 200), ih)
        cases.append((iw, ih, ow, oh))
    return cases


def write_resize():
    lines = ["# ref_qwenvl_video.py torch kernels; columns: seed,pattern,in_w,in_h,out_w,out_h,"
             "u8,tv1_default,tv1_avx2,tv1_avx512,f32_default,f32_avx2,f32_avx512 (sha256, see make_fixtures.py)"]
    for n, (iw, ih, ow, oh) in enumerate(resize_cases()):
        seed, pattern = 7000003 * (n + 1), n % 2
        chw = synthetic_image(seed, pattern, iw, ih).transpose(2, 0, 1)
        cols = [str(seed), str(pattern), str(iw), str(ih), str(ow), str(oh),
                sha(V.resize_u8_torch(chw, oh, ow).transpose(1, 2, 0))]
        cols += [sha(V.resize_tv1_u8(chw, oh, ow, cpu).transpose(1, 2, 0)) for cpu in CPUS]
        cols += [sha_f32(V.resize_f32_torch(chw, oh, ow, cpu).transpose(1, 2, 0)) for cpu in CPUS]
        lines.append(",".join(cols))
    return lines


def write_patchify():
    lines = ["# ref_qwenvl_video.py patchify_video(normalize_fused(frames)); columns: seed,pattern,family,frames,"
             "height,width,rows,sha256 (float32 LE, rows x 3*2*p*p)"]
    cases = [("qwen2-vl", 1, 28, 28), ("qwen2-vl", 2, 28, 56), ("qwen2-vl", 3, 56, 28), ("qwen2.5-vl", 5, 84, 56),
             ("qwen3-vl", 1, 32, 32), ("qwen3-vl", 4, 64, 32), ("qwen3-vl", 3, 32, 96), ("qwen3-vl", 7, 64, 64)]
    for n, (fam, t, h, w) in enumerate(cases):
        seed, pattern = 9000011 * (n + 1), n % 2
        frames = np.stack([synthetic_image(seed + k, pattern, w, h) for k in range(t)])
        f = V.FAMILIES[fam]
        x = V.normalize_fused(frames.transpose(0, 3, 1, 2), f["mean"], f["std"])
        pv, _ = V.patchify_video(x, f["patch_size"], f["merge_size"], f["temporal_patch_size"])
        lines.append(f"{seed},{pattern},{fam},{t},{h},{w},{pv.shape[0]},{sha(pv.astype('<f4'))}")
    return lines


def torchvision_image(img_hwc, family, min_pixels, max_pixels):
    """transformers 5.18.0 Qwen2VLImageProcessor (TorchvisionBackend) on one uint8 RGB image: smart_resize (the same
    function as the video one of the reference), torchvision v2 uint8 resize, fused rescale+normalize, patchify with
    the image repeated over the temporal patch (= patchify_video of one frame)."""
    f = V.FAMILIES[family]
    p, m = f["patch_size"], f["merge_size"]
    h, w = img_hwc.shape[:2]
    rh, rw = V.smart_resize_hf_qwen2_video(h, w, p * m, min_pixels, max_pixels)
    chw = V.resize_u8_torch(img_hwc.transpose(2, 0, 1), rh, rw)
    x = V.normalize_fused(chw[None], f["mean"], f["std"])
    pv, (gt, gh, gw) = V.patchify_video(x, p, m, f["temporal_patch_size"])
    return pv, (1, gh, gw)


def write_images():
    lines = ["# transformers 5.18 Qwen2VLImageProcessor (torchvision backend) as ref_qwenvl_video.py builds it "
             "(make_fixtures.torchvision_image); columns: seed,pattern,family,width,height,min_pixels,max_pixels,"
             "grid_t,grid_h,grid_w,sha256 (pixel_values float32 LE)"]
    cases = [("qwen2-vl", 97, 61, 3136, 12845056), ("qwen2.5-vl", 300, 41, 3136, 12845056),
             ("qwen2.5-vl", 640, 480, 3136, 50176), ("qwen3-vl", 123, 77, 65536, 16777216),
             ("qwen3-vl", 20, 500, 4096, 16777216), ("qwen2-vl", 28, 28, 3136, 12845056)]
    for n, (fam, w, h, lo, hi) in enumerate(cases):
        seed, pattern = 5000011 * (n + 1), n % 2
        pv, (gt, gh, gw) = torchvision_image(synthetic_image(seed, pattern, w, h), fam, lo, hi)
        lines.append(f"{seed},{pattern},{fam},{w},{h},{lo},{hi},{gt},{gh},{gw},{sha(pv.astype('<f4'))}")
    return lines


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, lines in (("torch_resize_cases.csv", write_resize()), ("video_patchify_cases.csv", write_patchify()),
                        ("torchvision_image_cases.csv", write_images())):
        with open(os.path.join(OUT, name), "w") as fh:
            fh.write("\n".join(lines) + "\n")
        print(name, len(lines) - 1, "cases")


if __name__ == "__main__":
    main()
