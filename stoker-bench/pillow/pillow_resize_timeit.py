#!/usr/bin/python3
"""Single-thread Pillow Image.resize(BICUBIC) times for the ResizeBenchmark scenarios (the rival of
dev.stoker.bench.ResizeBenchmark). Targets are the Qwen2.5-VL smart_resize sizes (factor 28).
    /usr/bin/python3 stoker-bench/pillow/pillow_resize_timeit.py
"""
import math
import os
import timeit

import numpy as np
import PIL
from PIL import Image


def smart_resize(h, w, factor=28, min_pixels=3136, max_pixels=1003520):
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb, wb = math.floor(h / beta / factor) * factor, math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def photo_like(w, h):
    y, x = np.mgrid[0:h, 0:w]
    rnd = np.random.default_rng(1).integers(0, 8, size=(h, w, 3))
    c = np.arange(3)
    return ((x[..., None] * (c + 1) // 7 + y[..., None] // 5 + rnd) & 0xFF).astype(np.uint8)


def main():
    print(f"Pillow {PIL.__version__}, cpu_count {os.cpu_count()} (Pillow's resize is single-threaded)")
    for (w, h, maxp) in [(1920, 1080, 451584), (1920, 1080, 1003520), (640, 480, 1003520)]:
        th, tw = smart_resize(h, w, max_pixels=maxp)
        img = Image.fromarray(photo_like(w, h), "RGB")
        n = 20 if w > 1000 else 100
        best = min(timeit.repeat(lambda: img.resize((tw, th), Image.BICUBIC), number=n, repeat=5)) / n
        print(f"{w}x{h}@{maxp} -> {tw}x{th}: {best * 1e3:.3f} ms/op, {w * h / 1e6 / best:.1f} input MP/s")


if __name__ == "__main__":
    main()
