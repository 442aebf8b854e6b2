#!/usr/bin/python3
"""Generates the llamafactory sampler's plan fixtures from LLaMA-Factory's and transformers' own source.

    /usr/bin/python3 tools/video-sampler-fixtures/make_llamafactory_fixtures.py \
        --mm-plugin LLaMA-Factory/src/llamafactory/data/mm_plugin.py --transformers DIR/transformers

  --mm-plugin     LLaMA-Factory's mm_plugin.py (the fixtures were made from 0.9.6.dev0, hiyouga/LLaMA-Factory
                  @ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30)
  --transformers  the `transformers` package folder of transformers 5.18.0 (an unpacked wheel is enough: only
                  its .py files are read)

Writes stoker-video/src/test/resources/dev/stoker/video/sample/llamafactory-fixtures.json.

No torch, no PyAV: the functions are taken out of the source files with `ast` and run unchanged on
stand-ins (numpy for torch.tensor; a stream object with PyAV's .frames/.duration/.time_base/.average_rate):
  MMPluginMixin._get_video_sample_indices, Qwen2VLPlugin._get_qwen_video_size_after_regularization,
  Qwen2VLPlugin._get_qwen_video_grid_metadata (the token path: grid and frame "indices" for the timestamps),
  Qwen2VLPlugin/Qwen3VLPlugin._get_qwen_video_resize, transformers' qwen2_vl image smart_resize and qwen3_vl
  video smart_resize, Qwen3VLProcessor._calculate_timestamps.
Replayed by hand (marked in the output): _get_qwen_video_stream_metadata's av.open (its None cases), the
decode loop of _regularize_videos (`frame_idx in sample_indices` over the decoded frames, even padding) and its
fps_per_video, which give the tensor path's frames ("indices": those decoded) and second_per_grid_ts.  A sample whose token path and
tensor path disagree on the (even-padded) frame count is expected to be refused; where they agree although
the header over-counts by one (an odd shortfall hidden by the padding), the plan keeps the frames that exist.
"""
import argparse
import ast
import json
import math
import os
import random
import sys
import types
from fractions import Fraction
from typing import Any, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "stoker-video/src/test/resources/dev/stoker/video/sample")


def extract(path, cls, name, ns):
    """Defines function `name` (a method of class `cls`, or top-level when cls is None) from `path` in `ns`."""
    tree = ast.parse(open(path).read())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    mod = ast.Module(body=[fn], type_ignores=[])
    exec(compile(mod, f"{path}:{cls}.{name}", "exec"), ns)
    return ns[name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mm-plugin", required=True)
    ap.add_argument("--transformers", required=True)
    args = ap.parse_args()
    tf = args.transformers
    ns = dict(math=math, np=np, Optional=Optional, Any=Any,
              torch=types.SimpleNamespace(tensor=lambda x, dtype=None: np.array(x, np.int64), long=None,
                                          empty=lambda shape, dtype=None: np.zeros(shape, np.int64)))
    q2_resize = extract(os.path.join(tf, "models/qwen2_vl/image_processing_qwen2_vl.py"), None, "smart_resize", dict(ns))
    q3_resize = extract(os.path.join(tf, "models/qwen3_vl/video_processing_qwen3_vl.py"), None, "smart_resize", dict(ns))
    calc_ts = extract(os.path.join(tf, "models/qwen3_vl/processing_qwen3_vl.py"), "Qwen3VLProcessor", "_calculate_timestamps", dict(ns))
    for modname, attr in (("transformers.models.qwen2_vl.image_processing_qwen2_vl", q2_resize),
                          ("transformers.models.qwen3_vl.video_processing_qwen3_vl", q3_resize)):
        parts = modname.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        sys.modules[modname].smart_resize = attr
    mp = args.mm_plugin
    sample_idx = extract(mp, "MMPluginMixin", "_get_video_sample_indices", dict(ns))
    reg_size = extract(mp, "Qwen2VLPlugin", "_get_qwen_video_size_after_regularization", dict(ns))
    grid_meta = extract(mp, "Qwen2VLPlugin", "_get_qwen_video_grid_metadata", dict(ns))
    resize2 = extract(mp, "Qwen2VLPlugin", "_get_qwen_video_resize", dict(ns))
    resize3 = extract(mp, "Qwen3VLPlugin", "_get_qwen_video_resize", dict(ns))

    class Stream:
        def __init__(self, frames, duration, time_base, average_rate, width, height):
            self.frames, self.duration, self.time_base = frames, duration, time_base
            self.average_rate, self.width, self.height = average_rate, width, height

    def plan(family, stream, decoded, video_fps, maxlen, vmax, vmin, pmin, pmax, compat):
        """One video through LLaMA-Factory's token path and (replayed) tensor path."""
        patch = 16 if family == "qwen3-vl" else 14
        plugin = types.SimpleNamespace()
        plugin._get_video_sample_indices = lambda s, **kw: sample_idx(plugin, s, **kw)
        plugin._get_qwen_video_size_after_regularization = lambda *a: reg_size(plugin, *a)
        rz = resize3 if family == "qwen3-vl" else resize2

        def q3_compat(*a, **kw):
            if compat == "4.57" and (kw["height"] < kw["factor"] or kw["width"] < kw["factor"]):
                raise ValueError(f"height:{kw['height']} or width:{kw['width']} must be larger than factor:{kw['factor']}")
            return q3_resize(*a, **kw)
        sys.modules["transformers.models.qwen3_vl.video_processing_qwen3_vl"].smart_resize = q3_compat
        plugin._get_qwen_video_resize = lambda *a: rz(plugin, *a)

        def stream_meta(video, video_fps, video_maxlen):  # replay of _get_qwen_video_stream_metadata's checks
            if stream.duration is None or stream.average_rate is None:
                return None
            avg = float(stream.average_rate)
            if avg <= 0:
                return None
            return dict(width=stream.width, height=stream.height, average_fps=avg,
                        sample_indices=sample_idx(plugin, stream, video_fps=video_fps, video_maxlen=video_maxlen))
        plugin._get_qwen_video_stream_metadata = stream_meta
        processor = types.SimpleNamespace(
            image_processor=types.SimpleNamespace(), video_fps=video_fps, video_maxlen=maxlen,
            video_max_pixels=vmax, video_min_pixels=vmin,
            video_processor=types.SimpleNamespace(patch_size=patch, temporal_patch_size=2, merge_size=2,
                                                  size={"shortest_edge": pmin, "longest_edge": pmax}))
        try:
            # tensor path (replayed _regularize_videos): decode loop keeps `frame_idx in sample_indices`
            idx = [int(i) for i in sample_idx(plugin, stream, video_fps=video_fps, video_maxlen=maxlen)]
            kept = [i for i in range(decoded) if i in idx]
            meta = grid_meta(plugin, ["clip.mp4"], processor)
            if meta is None:   # token path falls back to _get_mm_inputs: the tensor path's own frames
                indices, t_frames = kept, len(kept) + len(kept) % 2
                w, h = reg_size(plugin, stream.width, stream.height, vmax, vmin)
                rh, rw = rz(plugin, t_frames, h, w, patch, 2, 2, pmin, pmax)
                grid = [math.ceil(t_frames / 2), rh // patch, rw // patch]
                frames_indices = [i / float(stream.average_rate) * video_fps for i in idx]
                path = "fallback"
            else:
                grid = [int(v) for v in meta["video_grid_thw"][0]]
                frames_indices = meta["frames_indices"][0]
                indices = kept   # the frames decoded; an odd count is padded with the last kept frame
                if len(kept) + len(kept) % 2 != grid[0] * 2:
                    return dict(error=f"token path {grid[0] * 2} frames, tensor path {len(kept)}",
                                why="LLaMA-Factory's header-count indices pass the decoded frames")
                w, h = reg_size(plugin, stream.width, stream.height, vmax, vmin)
                path = "metadata"
            fps_per_video = video_fps if stream.duration is None else len(idx) / float(stream.duration * stream.time_base)
            res = dict(indices=indices, frame=[h, w], grid=grid, sampled_fps=fps_per_video, path=path)
            res["resized"] = [grid[1] * patch, grid[2] * patch]
            if family == "qwen2.5-vl":
                res["second_per_grid_t"] = float(np.float32(2 / fps_per_video))
            if family == "qwen3-vl":
                ts = calc_ts(None, list(frames_indices), video_fps, 2)[: grid[0]]
                res["timestamps"] = [float(t) for t in ts]
                res["timestamp_text"] = [f"<{t:.1f} seconds>" for t in ts]
            return res
        except (ValueError, ZeroDivisionError, TypeError) as e:
            return dict(error=f"{type(e).__name__}: {e}")

    rng = random.Random(290)
    cases = []
    rates = [Fraction(25), Fraction(24000, 1001), Fraction(359, 12), Fraction(30000, 1001), Fraction(2), Fraction(60)]
    sizes = [(640, 360), (1920, 1080), (288, 512), (176, 144), (320, 240), (20, 20), (3000, 17), (100, 10), (8000, 60),
             (1280, 720), (31, 31)]
    families = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]

    def add(family, frames, decoded, dur_ticks, tb, rate, w, h, opts, proc, compat, note=None):
        stream = Stream(frames, dur_ticks, tb, rate, w, h)
        video_fps = opts.get("fps", 2.0)
        maxlen = int(opts.get("max_frames", 128))
        vmax, vmin = opts.get("max_pixels", 256 * 256), opts.get("min_pixels", 16 * 16)
        pmin, pmax = proc
        c = dict(id=len(cases), family=family, compat=compat, header_frames=frames, decoded=decoded,
                 duration_seconds=None if dur_ticks is None else float(dur_ticks * tb), average_fps=float(rate),
                 width=w, height=h, options=opts, processor=dict(min_pixels=pmin, max_pixels=pmax))
        if note:
            c["note"] = note
        c["expected"] = plan(family, stream, decoded, video_fps, maxlen, vmax, vmin, pmin, pmax, compat)
        cases.append(c)

    hub = {"qwen2-vl": (3136, 12845056), "qwen2.5-vl": (3136, 12845056), "qwen3-vl": (4096, 25165824)}
    # LLaMA-Factory's demo clips' shapes: 25 fps and 23.976 fps MP4, 359/12 fps AVI; a WebM without header count
    for family in families:
        for compat in ("5.18", "4.57"):
            add(family, 250, 250, 128000, Fraction(1, 12800), Fraction(25), 640, 360, {}, hub[family], compat, "10 s 25 fps MP4")
            add(family, 240, 240, 240240, Fraction(1, 24000), Fraction(24000, 1001), 1280, 720, {}, hub[family], compat, "23.976 fps")
            add(family, 359, 359, 359, Fraction(12, 359), Fraction(359, 12), 352, 288, {}, hub[family], compat, "AVI 359/12")
            add(family, 0, 100, None, Fraction(1, 1000), Fraction(24), 320, 240, {}, hub[family], compat, "WebM: no count, no duration")
            add(family, 0, 300, None, Fraction(1, 1000), Fraction(24), 320, 240, {}, hub[family], compat, "WebM, longer than maxlen")
            add(family, 0, 100, 4167, Fraction(1, 1000), Fraction(24), 320, 240, {}, hub[family], compat, "no count, a duration")
            add(family, 60, 50, 30000, Fraction(1, 12800), Fraction(25), 640, 360, {"fps": 25}, hub[family], compat, "header over-counts")
            add(family, 60, 60, None, Fraction(1, 12800), Fraction(25), 640, 360, {}, hub[family], compat, "count without duration")
            add(family, 1, 1, 512, Fraction(1, 12800), Fraction(25), 640, 360, {}, hub[family], compat, "1 frame")
            add(family, 3, 3, 3 * 512, Fraction(1, 12288), Fraction(24), 20, 20, {}, hub[family], compat, "3 tiny frames")
    while len(cases) < 400:
        family = rng.choice(families)
        rate = rng.choice(rates)
        frames = rng.choice([1, 2, 3, 5, 17, 50, 61, 128, 129, 300, 1000, 7200])
        decoded = frames if rng.random() < 0.85 else max(1, frames + rng.choice([-5, -1, 1, 5]))
        tb = rng.choice([Fraction(1, 12800), Fraction(1, 1000), Fraction(1, 90000), 1 / rate])
        dur = int(round(frames / rate / tb)) if rng.random() < 0.9 else None
        w, h = rng.choice(sizes)
        opts = {}
        if rng.random() < 0.4:
            opts["fps"] = rng.choice([0.5, 1.0, 2.0, 4.0, 10.0, 3.0, 0.3, 1.7, 29.97])
        if rng.random() < 0.3:
            opts["max_frames"] = rng.choice([2, 4, 16, 32, 64, 128, 256])
        if rng.random() < 0.3:
            opts["max_pixels"] = rng.choice([784, 4096, 50176, 65536, 230400, 1003520])
        if rng.random() < 0.2:
            opts["min_pixels"] = rng.choice([256, 784, 3136])
        if opts.get("max_pixels", 65536) < opts.get("min_pixels", 256):
            continue  # LLaMA-Factory's ModelArguments refuse it; so does Stoker (unit test)
        proc = hub[family] if rng.random() < 0.7 else rng.choice([(3136, 50176), (4096, 61440), (100352, 602112), (4096, 16384)])
        add(family, frames, decoded, dur, tb, rate, w, h, opts, proc, rng.choice(["5.18", "4.57"]))
    with open(os.path.join(OUT, "llamafactory-fixtures.json"), "w") as f:
        json.dump(dict(generator="tools/video-sampler-fixtures/make_llamafactory_fixtures.py",
                       reference="LLaMA-Factory 0.9.6.dev0 @ff6d4d12 mm_plugin.py + transformers 5.18.0 source",
                       cases=cases), f, separators=(",", ":"))
        f.write("\n")
    print(len(cases), "cases,", sum("error" in c["expected"] for c in cases), "errors")


if __name__ == "__main__":
    main()
