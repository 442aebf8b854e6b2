"""Fixtures for the llamafactory video sampler's encoding (issue 29, Build item 5): tiny clips made by the ffmpeg CLI,
run through a port of LLaMA-Factory's Qwen-VL video path and the real transformers video processor, written where the
Java tests read them (stoker-encode/src/test/resources/dev/stoker/encode/video/llamafactory/). Run once with a venv
holding transformers 5.18.0, torch 2.13.0+cpu, torchvision 0.28.0 (its meta registrations guarded as
tools/hf-check/make_venvs.sh does), av 18.1, Pillow 12.3 and NumPy (the offline mirror's):

    /work/venv-lfpreresize/bin/python tools/video-llamafactory-fixtures/make_fixtures.py

Reference ported (read, not copied): LLaMA-Factory 0.9.6.dev0, src/llamafactory/data/mm_plugin.py at
hiyouga/LLaMA-Factory@ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30 (2026-08-18):
  1. BasePlugin._get_video_sample_indices: n = min(stream.frames, video_maxlen, max(1, floor(duration · video_fps))),
     np.linspace(0, frames − 1, n).astype(int32);
  2. Qwen2VLPlugin._regularize_videos: decode every frame with PyAV from the start, keep `frame.to_image()` (FFmpeg's
     rgb24) of those whose decode number is in the indices, an odd count padded with the last frame, then each frame
     through _preprocess_image; fps_per_video = len(indices) / duration (→ second_per_grid_ts = 2 / it);
  3. Qwen2VLPlugin._preprocess_image = BasePlugin._preprocess_image (Image.resize((w, h)) at Pillow's default
     resample, BICUBIC for RGB, to video_max_pixels when over it, then to video_min_pixels when under it, each
     int(edge · sqrt(budget / (w·h))); convert("RGB")), then its own: min side < 28 → Image.resize((max(w, 28),
     max(h, 28))); aspect > 200 → cut to 180. Each resize takes the previous one's output.
  4. the processor call: Qwen2VLPlugin._get_mm_inputs (Qwen2/2.5-VL) calls `video_processor(videos=frames,
     return_tensors="pt")`; Qwen3VLPlugin._get_mm_inputs calls it with `video_metadata` (fps = video_fps,
     frames_indices = idx / average_fps · video_fps, total_num_frames = len(frames)), `fps=video_fps`,
     `return_metadata=True`, `do_sample_frames=False`. Both are done here with the real processor, loaded as LLaMA-Factory loads it (AutoProcessor
     of a model folder holding the Hub Instruct models' configs: tools/hf-check/model_folders.py).
LLaMA-Factory's defaults: video_fps 2.0, video_maxlen 128, video_max_pixels 256·256, video_min_pixels 16·16.

pixel_values_videos is stored as the SHA-256 of its float32 bytes and each row's CRC-32 (row_crc32.npy), to keep the
fixtures small. The clips are stored beside them, so the Java tests need neither Python, nor ffmpeg, nor ../shared.
"""
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import av
import numpy as np
import PIL
import torch
import transformers
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "stoker-encode/src/test/resources/dev/stoker/encode/video/llamafactory")
sys.path.insert(0, os.path.join(ROOT, "tools", "hf-check"))
import model_folders  # noqa: E402

VIDEO_FPS, VIDEO_MAXLEN, MAX_PIXELS, MIN_PIXELS = 2.0, 128, 256 * 256, 16 * 16

# name, family, ffmpeg testsrc2 size, rate, seconds, why
CASES = [
    ("l1_qwen25_320x240", "qwen2.5-vl", "320x240", 8, 1.5, "over video_max_pixels: one Pillow resize to 295x221; 3 picks padded to 4"),
    ("l2_qwen3_4000x20", "qwen3-vl", "4000x20", 4, 1.0, "two chained Pillow resizes: to 3620x18 (max_pixels), then 3620x28 (min side)"),
    ("l3_qwen2_176x144", "qwen2-vl", "176x144", 6, 2.0, "under every bound: no Pillow resize, the processor alone"),
]


def make_clip(path, size, rate, seconds):
    subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size={size}:rate={rate}:duration={seconds}", "-c:v", "libx264", "-preset", "ultrafast",
                    "-pix_fmt", "yuv420p", path], check=True)


# ---- the port of LLaMA-Factory (see the docstring) ----------------------------------------------------------------
def sample_indices(stream):
    total = stream.frames
    if total == 0:
        return np.linspace(0, VIDEO_MAXLEN - 1, VIDEO_MAXLEN).astype(np.int32)
    n = max(1, math.floor(float(stream.duration * stream.time_base) * VIDEO_FPS))
    n = min(total, VIDEO_MAXLEN, n)
    return np.linspace(0, total - 1, n).astype(np.int32)


def preprocess_image(image, steps):
    if image.width * image.height > MAX_PIXELS:
        f = math.sqrt(MAX_PIXELS / (image.width * image.height))
        image = image.resize((int(image.width * f), int(image.height * f)))
        steps.append(image.size)
    if image.width * image.height < MIN_PIXELS:
        f = math.sqrt(MIN_PIXELS / (image.width * image.height))
        image = image.resize((int(image.width * f), int(image.height * f)))
        steps.append(image.size)
    if image.mode != "RGB":
        image = image.convert("RGB")
    if min(image.width, image.height) < 28:
        image = image.resize((max(image.width, 28), max(image.height, 28)))
        steps.append(image.size)
    if image.width / image.height > 200:
        image = image.resize((image.height * 180, image.height))
        steps.append(image.size)
    if image.height / image.width > 200:
        image = image.resize((image.width, image.width * 180))
        steps.append(image.size)
    return image


def regularize_video(path):
    container = av.open(path, "r")
    stream = next(s for s in container.streams if s.type == "video")
    idx = sample_indices(stream)
    average_fps = float(stream.average_rate)
    duration = float(stream.duration * stream.time_base)
    container.seek(0)
    frames, kept = [], []
    for k, frame in enumerate(container.decode(stream)):
        if k in idx:
            frames.append(frame.to_image())
            kept.append(k)
    container.close()
    if len(frames) % 2 != 0:
        frames.append(frames[-1])
    steps = []
    frames = [preprocess_image(f, steps if i == 0 else []) for i, f in enumerate(frames)]
    return dict(frames=frames, indices=[int(i) for i in idx], kept=kept, average_fps=average_fps, duration=duration,
                fps_per_video=len(idx) / duration, steps=[list(s) for s in steps])


def video_processor(family, tmp):
    """The processor LLaMA-Factory loads (AutoProcessor of the model folder; model_folders writes the Hub Instruct
    models' configs, so the video processor takes the Hub folders' settings, e.g. Qwen2/2.5's min_pixels 3,136)."""
    from transformers import AutoProcessor
    d = os.path.join(tmp, family)
    model_folders.write(d, family)
    if family == "qwen3-vl":
        # model_folders writes no video_preprocessor_config.json (the processor would take the image settings); the Hub
        # Qwen3-VL Instruct folders have one: the video budget 4,096 … 25,165,824 over all frames (Stoker's hf defaults)
        with open(os.path.join(d, "video_preprocessor_config.json"), "w") as f:
            json.dump({"video_processor_type": "Qwen3VLVideoProcessor", "size": {"longest_edge": 25165824, "shortest_edge": 4096},
                       "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                       "image_std": [0.5, 0.5, 0.5], "fps": 2, "min_frames": 4, "max_frames": 768, "do_sample_frames": True}, f)
    return AutoProcessor.from_pretrained(d).video_processor


def main():
    assert transformers.__version__ == "5.18.0", transformers.__version__
    from transformers.video_utils import VideoMetadata
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    names = []
    tmp = tempfile.mkdtemp()
    for name, family, size, rate, seconds, why in CASES:
        d = os.path.join(OUT, name)
        os.makedirs(d)
        clip = os.path.join(d, "clip.mp4")
        make_clip(clip, size, rate, seconds)
        r = regularize_video(clip)
        vp = video_processor(family, tmp)
        print(name, type(vp).__name__, vp.size)
        if family == "qwen3-vl":
            md = VideoMetadata(total_num_frames=len(r["frames"]), fps=VIDEO_FPS,
                               frames_indices=[i / r["average_fps"] * VIDEO_FPS for i in r["indices"]])
            out = vp(videos=[r["frames"]], video_metadata=[md], fps=VIDEO_FPS, return_metadata=True,
                     do_sample_frames=False, return_tensors="pt")
        else:
            out = vp(videos=[r["frames"]], return_tensors="pt")
        pv = out["pixel_values_videos"].numpy().astype(np.float32)
        grid = out["video_grid_thw"].numpy().astype(np.int64)
        # pixel_values_videos itself is megabytes of float32: kept as the SHA-256 of its little-endian bytes (row-major)
        # and each row's CRC-32 (so a mismatch is located to a row: its temporal group, patch and channel block)
        le = pv.astype("<f4")
        rows_crc = np.array([zlib.crc32(le[i].tobytes()) for i in range(le.shape[0])], dtype="<i8")
        np.save(os.path.join(d, "row_crc32.npy"), rows_crc)
        np.save(os.path.join(d, "video_grid_thw.npy"), grid)
        w, h = r["frames"][0].size
        expect = dict(family=family, why=why, clip=f"ffmpeg testsrc2 {size} {rate} fps {seconds} s libx264 ultrafast yuv420p",
                      sample_indices=r["indices"], frames_kept=r["kept"], pre_resize_steps=r["steps"], pillow_wh=[w, h],
                      padded_frames=len(r["frames"]), video_grid_thw=grid.tolist()[0],
                      pixel_values_videos_shape=list(pv.shape),
                      pixel_values_videos_sha256=hashlib.sha256(le.tobytes()).hexdigest(),
                      second_per_grid_ts=2 / r["fps_per_video"], transformers=transformers.__version__,
                      pillow=PIL.__version__, av=av.__version__, torch=torch.__version__,
                      llamafactory="hiyouga/LLaMA-Factory@ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30")
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expect, f, indent=1)
        names.append(name)
        print(name, grid.tolist(), pv.shape, r["indices"], r["steps"], os.path.getsize(clip), "bytes")
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
