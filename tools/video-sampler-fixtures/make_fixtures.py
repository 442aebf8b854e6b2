#!/usr/bin/python3
"""Generates stoker-video's video-plan fixtures from the shared reference (ref_qwenvl_video.py, numpy only).

    /usr/bin/python3 tools/video-sampler-fixtures/make_fixtures.py [--shared ../shared]

Writes, under stoker-video/src/test/resources/dev/stoker/video/sample/:
  plan-fixtures.json     a few hundred (frames, fps, size, options, per-item keys, family, sampler, compat)
                         combinations and what the reference's process_video gives for them: sampled frame
                         indices, resized size, grid, sampled fps, Qwen2.5's second_per_grid_t (float32),
                         Qwen3's group timestamps and their text, or the error it raises.
  vectors-4.57.json      the same for every case of ../shared/vectors/qwen-vl-video under compat="4.57"
                         (the case.json files hold 5.18's values).

The reference's process_video runs unchanged; only its pixel work is replaced by shape bookkeeping
(FakeFrames below), so the plan is the reference's own code path.  Deterministic (fixed seed); the
committed files are what the Java tests (VideoPlanFixtureTest, VectorPlanTest) compare with, exactly.

Where the reference returns a plan that the real libraries cannot execute, the expected result is an
error, marked "why": a resized size of 0 (torch.nn.functional.interpolate refuses output sizes < 1).
Combinations Stoker refuses although the reference accepts them (an hf item with both fps and nframes;
resized_height without resized_width; --video-total-pixels in hf mode) are not generated: the Java
unit tests hold those refusals.
"""
import argparse
import json
import math
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "stoker-video/src/test/resources/dev/stoker/video/sample")


class FakeFrames:
    """Stands in for a uint8 (T, H, W, 3) / (n, C, H, W) array: only shapes, no pixels."""

    def __init__(self, shape):
        self.shape = tuple(int(s) for s in shape)
        self.ndim = len(self.shape)
        self.dtype = np.uint8

    def __getitem__(self, idx):
        idx = list(idx)
        for i in idx:
            if not -self.shape[0] <= i < self.shape[0]:
                raise IndexError(f"index {i} is out of bounds for axis 0 with size {self.shape[0]}")
        return FakeFrames((len(idx),) + self.shape[1:])

    def transpose(self, *axes):
        return FakeFrames(tuple(self.shape[a] for a in axes))


def install_fakes(V):
    V.resize_u8_torch = lambda x, oh, ow: FakeFrames(x.shape[:-2] + (oh, ow))
    V.resize_tv1_u8 = lambda x, oh, ow, cpu="avx2": FakeFrames(x.shape[:-2] + (oh, ow))
    V.normalize_fused = lambda x, mean, std: x

    def patchify(x, p, m, tps):
        T, C, H, W = x.shape
        T += -T % tps
        return None, (T // tps, H // p, W // p)
    V.patchify_video = patchify


def plan(V, total, fps, h, w, family, sampler, compat, opts, item):
    try:
        out = V.process_video(FakeFrames((total, h, w, 3)), fps, family, sampler, opts, item, compat, total=total)
    except (V.VideoError, IndexError) as e:
        return dict(error=str(e))
    rh, rw = out["resized_hw"]
    if rh < 1 or rw < 1:
        return dict(error=f"resized to {rh}x{rw} pixels", why="interpolate refuses output sizes < 1")
    gt, gh, gw = [int(v) for v in out["video_grid_thw"]]
    res = dict(indices=out["indices"], resized=[rh, rw], grid=[gt, gh, gw], sampled_fps=out["sampled_fps"])
    if family == "qwen2.5-vl":
        res["second_per_grid_t"] = float(np.float32(out["second_per_grid_t"]))
    if family == "qwen3-vl":
        res["timestamps"] = [float(t) for t in out["timestamps"]]
        res["timestamp_text"] = [f"<{V.format_seconds(t)} seconds>" for t in out["timestamps"]]
    return res


FPS = [25.0, 24.0, 30000 / 1001, 24000 / 1001, 2.0, 1.0, 60.0, 359 / 12, 0.5, 120.0, 15.0, 50.0]
TOTALS = [1, 2, 3, 4, 5, 6, 7, 9, 10, 16, 17, 31, 50, 61, 100, 230, 367, 382, 500, 1000, 1799, 3600, 18000, 86400]
SIZES = [(360, 640), (272, 480), (1080, 1920), (512, 288), (96, 160), (144, 176), (240, 320), (2160, 3840),
         (10, 10), (31, 31), (20, 2000), (4000, 30), (1, 1), (28, 5600), (16, 16), (33, 47), (720, 1280), (17, 3000)]
FAMILIES = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]
HF_ITEM = ["fps", "nframes", "min_pixels", "max_pixels", "min_frames", "max_frames"]
QVU_ITEM = HF_ITEM + ["total_pixels", "video_start", "video_end", "resized"]
OPT_KEYS = ["fps", "min_frames", "max_frames", "min_pixels", "max_pixels", "total_pixels"]


def rand_value(rng, key, family, total, fps):
    f = 32 if family == "qwen3-vl" else 28
    if key == "fps":
        return rng.choice([0.5, 1, 1.0, 2, 2.0, 3, 4.0, 0.25, 1.5, 10, 29.97])
    if key == "nframes":
        return rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 14, 16, 31, 32, 64, max(1, total // 2), total, total + 1])
    if key == "min_frames":
        return rng.choice([0, 1, 2, 3, 4, 5, 8, 16])
    if key == "max_frames":
        return rng.choice([1, 2, 3, 4, 7, 8, 16, 32, 64, 768])
    if key == "min_pixels":
        return rng.choice([0, 784, 3136, 4096, 128 * f * f, 100352, 1003520, 3136.5])
    if key == "max_pixels":
        return rng.choice([784, 3136, 6272, 20000, 61440, 602112, 768 * f * f, 12845056, 25165824, 50176.0])
    if key == "total_pixels":
        return rng.choice([90316800, 24576 * f * f, 128000 * f * f * 0.9, 1e6, 4096 * f * f])
    if key == "video_start":
        return rng.choice([0, 0.0, 0.5, 1.0, 0.04, 3.3, 10.0, total / fps / 2, total / fps + 1])
    if key == "video_end":
        return rng.choice([0.5, 1.7, 2.0, 5.0, total / fps, total / fps - 0.01, 1e6])
    raise KeyError(key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.shared, "reference"))
    import ref_qwenvl_video as V
    install_fakes(V)
    rng = random.Random(29)
    cases = []

    def add(total, fps, h, w, family, sampler, opts, item, note=None):
        for compat in ("5.18", "4.57"):
            c = dict(id=len(cases), total=total, fps=fps, height=h, width=w, family=family, sampler=sampler,
                     compat=compat, options=opts, item=item)
            if note:
                c["note"] = note
            c["expected"] = plan(V, total, fps, h, w, family, sampler, compat, opts, item)
            cases.append(c)

    # the ~1% arange crash lengths of HF's Qwen2/2.5 sampler at fps 2, and neighbours that do not crash
    for total, fps in [(382, 25.0), (367, 24.0), (230, 30000 / 1001), (381, 25.0), (383, 25.0), (368, 24.0)]:
        for family in FAMILIES:
            add(total, fps, 360, 640, family, "hf", {}, {}, "arange crash length (Qwen2/2.5)")
    add(17, 24.0, 144, 176, "qwen2.5-vl", "hf", {}, {"nframes": 14}, "d16: 17 frames, nframes 14")
    # t = 1, 2, 3, 5 frames kept
    for n in (1, 2, 3, 5):
        for family in FAMILIES:
            for sampler in ("hf", "qwen-vl-utils"):
                add(max(n, 5), 25.0, 240, 320, family, sampler, {}, {"nframes": n}, f"nframes {n}")
                add(n, 2.0, 240, 320, family, sampler, {}, {}, f"{n}-frame video")
    # tiny and huge frames, every family and sampler, at the defaults
    for h, w in SIZES:
        for family in FAMILIES:
            for sampler in ("hf", "qwen-vl-utils"):
                add(60, 30.0, h, w, family, sampler, {}, {}, "size")
    # trims
    for vs, ve in [(0.5, 1.7), (0.0, 1.0), (1.0, None), (None, 1.0), (1.9, 2.0), (0.04, 0.08), (3.0, 1.0), (0.0, 100.0)]:
        item = {k: v for k, v in (("video_start", vs), ("video_end", ve)) if v is not None}
        for family in FAMILIES:
            add(50, 25.0, 360, 640, family, "qwen-vl-utils", {}, item, "trim")
    # random combinations
    while len(cases) < 900:
        family = rng.choice(FAMILIES)
        sampler = rng.choice(["hf", "qwen-vl-utils"])
        total = rng.choice(TOTALS)
        fps = rng.choice(FPS)
        h, w = rng.choice(SIZES)
        opts = {}
        for k in OPT_KEYS:
            if k == "total_pixels" and sampler == "hf":
                continue
            if rng.random() < 0.3:
                opts[k] = rand_value(rng, k, family, total, fps)
        item = {}
        for k in (HF_ITEM if sampler == "hf" else QVU_ITEM):
            if rng.random() < 0.2:
                if k == "resized":
                    item["resized_height"] = rng.choice([1, 27, 28, 100, 360, 1080])
                    item["resized_width"] = rng.choice([1, 28, 50, 640, 1920])
                else:
                    item[k] = rand_value(rng, k, family, total, fps)
        if sampler == "hf" and "fps" in item and "nframes" in item:
            continue  # Stoker refuses it; the reference drops the fps
        add(total, fps, h, w, family, sampler, opts, item)

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "plan-fixtures.json"), "w") as f:
        json.dump(dict(generator="tools/video-sampler-fixtures/make_fixtures.py",
                       reference="ref_qwenvl_video.py process_video (shared reference; transformers 5.18.0/4.57.6, "
                                 "qwen-vl-utils 0.0.14)", cases=cases), f, separators=(",", ":"))
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c["expected"])
    print(f"{len(cases)} cases, {errors} errors")

    vec = os.path.join(args.shared, "vectors", "qwen-vl-video")
    if os.path.isdir(vec):
        manifest = json.load(open(os.path.join(vec, "MANIFEST.json")))["videos"]
        out = {}
        for case in sorted(os.listdir(vec)):
            cj = os.path.join(vec, case, "case.json")
            if not os.path.isfile(cj):
                continue
            c = json.load(open(cj))
            sample = json.load(open(os.path.join(vec, case, "sample.json")))
            items = [it for _, it in V.media_items(sample["messages"]) if _ == "video"]
            plans = []
            for it in items:
                m = manifest[it["video"]]
                plans.append(plan(V, m["decoded_frames"], m["average_fps"], m["height"], m["width"], c["family"],
                                  c["sampler"], "4.57", c.get("options"), it))
            out[case] = plans
        with open(os.path.join(OUT, "vectors-4.57.json"), "w") as f:
            json.dump(dict(generator="tools/video-sampler-fixtures/make_fixtures.py", compat="4.57", cases=out), f,
                      indent=1)
            f.write("\n")
        print(f"{len(out)} vector cases under 4.57")


if __name__ == "__main__":
    main()
