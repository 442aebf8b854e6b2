#!/usr/bin/env python3
"""The best Python pipeline built here for what `./stoker bench video` does, for the Must-show of issue 29
(docs/benchmarks.md, video): the same manifest (tools/bench-video-media/make-samples), the same outputs — each
video's `pixel_values_videos` and `video_grid_thw` from transformers 5.18.0's `Qwen2VLVideoProcessor` with sampling on
(fps 2, frames 4..768) and the Hub folders' pixel bounds (3136..12845056), the frames decoded by PyAV 18.1 as rgb24.

Two decode paths, each in several process/thread setups, so that "best" is measured, not assumed:
  hf       the processor's own path: PyAV decodes every frame, the processor samples (transformers' read_video_pyav
           does the same)
  skip     as sampled, with Stoker's trick: packets demuxed first, then those of unkept frames decoded with PyAV's
           skip_frame = NONREF (frames nothing refers to are not decoded)
  sampled  the frames to keep computed first (the processor's own `sample_frames` on the stream's metadata), PyAV
           decodes in order up to the last one and converts only the kept frames to arrays; the processor then runs
           with `do_sample_frames=False`
Setups: P worker processes (multiprocessing, fork) × T torch threads, PyAV's decoder threads D (0 = FFmpeg's auto).
Each setup: one untimed pass over the first W samples, then a timed pass over all (videos/s, wall clock).
--check DIR compares sample 0's arrays with Stoker's `encode` output in DIR (pixel_values_videos.npy, video_grid_thw.npy).

Usage: VENV/bin/python tools/video-baseline/baseline.py MANIFEST [--setups hf:1:1:1,sampled:2:1:1,...] [--check DIR]
(VENV: transformers==5.18.0 torch==2.13.0 torchvision==0.28.0 av==18.1.0 numpy, from the machine's pip mirror.)
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import av
import numpy as np
import torch
from transformers import Qwen2VLVideoProcessor
from transformers.video_utils import VideoMetadata

PROC = None
DECODER_THREADS = 0


def init(torch_threads, decoder_threads):
    global PROC, DECODER_THREADS
    torch.set_num_threads(torch_threads)
    DECODER_THREADS = decoder_threads
    PROC = Qwen2VLVideoProcessor(min_pixels=3136, max_pixels=12845056, do_sample_frames=True, fps=2.0,
                                 min_frames=4, max_frames=768)


def open_stream(path):
    c = av.open(path)
    s = c.streams.video[0]
    s.thread_count = DECODER_THREADS
    if DECODER_THREADS != 1:
        s.thread_type = "AUTO"
    return c, s


def encode_hf(path):
    c, s = open_stream(path)
    with c:
        fps = float(s.average_rate)
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)])
    md = VideoMetadata(total_num_frames=len(frames), fps=fps, width=frames.shape[2], height=frames.shape[1])
    out = PROC(videos=[frames], video_metadata=[md], do_sample_frames=True, fps=2.0, return_tensors="pt")
    return out["pixel_values_videos"], out["video_grid_thw"]


def encode_sampled(path):
    c, s = open_stream(path)
    with c:
        fps = float(s.average_rate)
        total = s.frames  # MP4: the sample table's exact count
        md = VideoMetadata(total_num_frames=total, fps=fps, width=s.codec_context.width, height=s.codec_context.height)
        wanted = [int(i) for i in PROC.sample_frames(md, fps=2.0)]
        keep = set(wanted)
        last = max(wanted)
        got = {}
        for i, f in enumerate(c.decode(s)):
            if i in keep:
                got[i] = f.to_ndarray(format="rgb24")
            if i >= last:
                break
    frames = np.stack([got[i] for i in wanted])
    out = PROC(videos=[frames], video_metadata=[md], do_sample_frames=False, return_tensors="pt")
    return out["pixel_values_videos"], out["video_grid_thw"]


def encode_skip(path):
    """As encode_sampled, with Stoker's trick: the stream's packets demuxed first (their pts in presentation order are
    the frame numbers), then decoded with skip_frame NONREF for every packet whose frame is not kept."""
    c, s = open_stream(path)
    with c:
        fps = float(s.average_rate)
        pts = sorted(p.pts for p in c.demux(s) if p.size > 0)
        md = VideoMetadata(total_num_frames=len(pts), fps=fps, width=s.codec_context.width, height=s.codec_context.height)
        wanted = [int(i) for i in PROC.sample_frames(md, fps=2.0)]
        keep_pts = {pts[i] for i in wanted}
        last_pts = pts[max(wanted)]
        c.seek(0, stream=s, backward=True, any_frame=False)
        cc = s.codec_context
        got = {}
        done = False
        for packet in c.demux(s):
            cc.skip_frame = "DEFAULT" if packet.pts in keep_pts else "NONREF"
            for f in cc.decode(packet):
                if f.pts in keep_pts:
                    got[f.pts] = f.to_ndarray(format="rgb24")
                if f.pts >= last_pts:
                    done = True
            if done:
                break
    frames = np.stack([got[pts[i]] for i in wanted])
    out = PROC(videos=[frames], video_metadata=[md], do_sample_frames=False, return_tensors="pt")
    return out["pixel_values_videos"], out["video_grid_thw"]


def work(args):
    mode, path = args
    pv, grid = {"hf": encode_hf, "sampled": encode_sampled, "skip": encode_skip}[mode](path)
    return int(pv.shape[0])


def videos(manifest):
    base = os.path.dirname(os.path.abspath(manifest))
    with open(manifest) as f:
        records = json.load(f)
    return [os.path.join(base, v) for r in records for v in r["videos"]]


def run(mode, procs, torch_threads, decoder_threads, paths, warm):
    ctx = mp.get_context("fork")
    with ctx.Pool(procs, initializer=init, initargs=(torch_threads, decoder_threads)) as pool:
        pool.map(work, [(mode, p) for p in paths[:warm]], chunksize=1)
        t0 = time.perf_counter()
        rows = pool.map(work, [(mode, p) for p in paths], chunksize=1)
        seconds = time.perf_counter() - t0
    return {"mode": mode, "procs": procs, "torch_threads": torch_threads, "decoder_threads": decoder_threads,
            "videos": len(paths), "seconds": round(seconds, 3), "videos_per_s": round(len(paths) / seconds, 3),
            "rows": sum(rows)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--setups", default="hf:1:2:0,hf:2:1:1,sampled:1:2:0,sampled:2:1:1,sampled:1:1:2")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--check")
    a = ap.parse_args()
    paths = videos(a.manifest)
    if a.check:
        init(1, 1)
        for fn in (encode_hf, encode_sampled, encode_skip):
            pv, grid = fn(paths[0])
            want_pv = np.load(os.path.join(a.check, "pixel_values_videos.npy"))
            want_grid = np.load(os.path.join(a.check, "video_grid_thw.npy"))
            same = pv.numpy().shape == want_pv.shape and np.array_equal(pv.numpy(), want_pv)
            print(f"{fn.__name__}: pixel_values_videos {tuple(pv.shape)} equal to Stoker's: {same}; "
                  f"grid {grid.tolist()} vs {want_grid.tolist()}", flush=True)
    best = None
    for setup in a.setups.split(","):
        mode, p, t, d = setup.split(":")
        r = run(mode, int(p), int(t), int(d), paths, a.warmup)
        print(json.dumps(r), flush=True)
        if best is None or r["videos_per_s"] > best["videos_per_s"]:
            best = r
    print(json.dumps({"best": best}))


if __name__ == "__main__":
    sys.exit(main())
