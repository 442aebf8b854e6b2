#!/usr/bin/python3
"""Generates resize_cases.csv: Pillow BICUBIC resize results (sha256 of the raw HWC u8 output) for
random sizes. The inputs are not stored: they come from a 64-bit LCG that the Java test reproduces
(BicubicResizerTest.syntheticImage). Run with the Pillow the vectors were made with (9.4.0):
    /usr/bin/python3 testdata/resize/make_resize_cases.py > testdata/resize/resize_cases.csv
"""
import hashlib
import random

import PIL
from PIL import Image

MASK = (1 << 64) - 1


def synthetic_image(seed, pattern, w, h):
    """pattern 0: uniform noise; 1: wrapping gradient plus 3-bit noise (hard edges and smooth areas)."""
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
    return bytes(out)


def main():
    rng = random.Random(20260101)
    cases = []
    fixed = [(1, 1, 1, 1), (1, 1, 7, 5), (5, 3, 1, 1), (400, 3, 3, 400), (3, 400, 300, 2), (448, 8, 448, 9),
             (64, 64, 64, 32), (64, 64, 32, 64), (200, 150, 28, 28), (37, 41, 512, 300)]
    for (iw, ih, ow, oh) in fixed:
        cases.append((iw, ih, ow, oh))
    while len(cases) < 160:
        iw, ih = rng.randint(1, 220), rng.randint(1, 220)
        kind = rng.random()
        if kind < 0.4:    # downscale, up to 8x
            ow, oh = max(1, int(iw / rng.uniform(1, 8))), max(1, int(ih / rng.uniform(1, 8)))
        elif kind < 0.75:  # upscale, up to 4x
            ow, oh = int(iw * rng.uniform(1, 4)) + 1, int(ih * rng.uniform(1, 4)) + 1
        elif kind < 0.9:   # mixed
            ow, oh = rng.randint(1, 300), rng.randint(1, 300)
        else:              # one axis unchanged
            ow, oh = (iw, rng.randint(1, 300)) if rng.random() < 0.5 else (rng.randint(1, 300), ih)
        cases.append((iw, ih, ow, oh))
    print(f"# Pillow {PIL.__version__} Image.resize(BICUBIC); columns: seed,pattern,in_w,in_h,out_w,out_h,sha256_raw_hwc_u8")
    for n, (iw, ih, ow, oh) in enumerate(cases):
        seed = 1000003 * (n + 1)
        pattern = n % 2
        img = Image.frombytes("RGB", (iw, ih), synthetic_image(seed, pattern, iw, ih))
        out = img.resize((ow, oh), resample=Image.BICUBIC).tobytes()
        print(f"{seed},{pattern},{iw},{ih},{ow},{oh},{hashlib.sha256(out).hexdigest()}")


if __name__ == "__main__":
    main()
