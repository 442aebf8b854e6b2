"""hf-check for video and for the torchvision image backend (issue 29): Stoker's `encode` against the real transformers
processors of the environment it runs in (CPU, no weights). Run it with each environment's Python:

    VENV/bin/python tools/hf-check/video_check.py --work DIR [--stoker ./stoker] [--skip-video] [--skip-images]

VENV: transformers 4.57.6 or 5.18.0, torch, torchvision, PyAV 18.1, NumPy, Pillow (make_venvs.sh, plus `av==18.1.0`).
The release given to `stoker encode --transformers` is the environment's (4.57 or 5.18).

1. Video. Clips made here with the ffmpeg CLI (DIR/clips: H.264/MP4 at 25 and 30000/1001 fps, one tagged BT.709,
   MPEG-4/AVI at 359/12 fps; 320x240 and 640x360; 2-4 s). For each family and clip, a one-video chat. transformers'
   side: PyAV decodes every frame (`to_ndarray("rgb24")`), metadata `fps = float(stream.average_rate)`,
   `total_num_frames` = the decoded count (as transformers' read_video_pyav reports them); the family's processor
   class (Qwen2VLProcessor / Qwen2_5_VLProcessor / Qwen3VLProcessor) with the model folder's tokenizer and published
   chat template and the family's video processor at its class defaults with sampling on (Qwen2/2.5: `fps=2` passed,
   their class has no default fps; Qwen3: its own defaults, fps 2). Stoker: `encode --model DIR --transformers REL
   --video-sampler hf --video-fps 2 --video-min-pixels/--video-max-pixels` = the bounds the video processor took.
   Compared bit for bit: pixel_values_videos, video_grid_thw, second_per_grid_ts (Qwen2.5), input_ids; and
   position_ids against a tiny random-init model's get_rope_index (hf_worker.tiny_model), with the video grid and
   second_per_grid_ts (and, from 5.3, mm_token_type_ids by docs/model-inputs.md §3).
2. Images, torchvision backend. check.py's photo and EXIF cases with images: `AutoProcessor.from_pretrained(DIR)`
   (its default, torchvision image processor: 5.18 `Qwen2VLImageProcessor`, 4.57 `Qwen2VLImageProcessorFast`)
   against `encode --model DIR --image-backend torchvision --transformers REL`: input_ids, pixel_values and
   image_grid_thw bit for bit.

Writes DIR/video-check-<release>.json and prints one line per row; exit status 0 when every row passed.
"""
import argparse
import concurrent.futures
import inspect
import json
import os
import subprocess
import sys
import time
import traceback

import av
import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import check  # noqa: E402  (stdlib only: the image cases)
import model_folders  # noqa: E402
from hf_worker import compare_exact, compare_positions, mm_rule, tiny_model, first_line, MM_TOKEN_TYPES  # noqa: E402

TV = tuple(int(x) for x in transformers.__version__.split(".")[:2])
RELEASE = f"{TV[0]}.{TV[1]}"

# (file, ffmpeg output options, what it is). testsrc2 moves and has colour bars, so frames differ and colours matter.
CLIPS = [
    ("c1_h264_25fps_320x240_2s.mp4", "testsrc2=size=320x240:rate=25:duration=2",
     ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-preset", "medium"], "H.264/MP4 25 fps, untagged (BT.601), 50 frames"),
    ("c2_h264_2997_640x360_3s_bt709.mp4", "testsrc2=size=640x360:rate=30000/1001:duration=3",
     ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-colorspace", "bt709", "-color_primaries", "bt709",
      "-color_trc", "bt709", "-color_range", "tv"], "H.264/MP4 30000/1001 fps, tagged BT.709, 90 frames"),
    ("c3_mpeg4_359over12_320x240_4s.avi", "testsrc2=size=320x240:rate=359/12:duration=4",
     ["-c:v", "mpeg4", "-q:v", "4"], "MPEG-4 Part 2/AVI 359/12 fps, 120 frames"),
    ("c4_h264_2997_640x360_3.5s.mp4", "testsrc2=size=640x360:rate=30000/1001:duration=3.5",
     ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-bf", "3"], "H.264/MP4 30000/1001 fps with B-frames, untagged, 105 frames"),
]


def make_clips(work):
    d = os.path.join(work, "clips")
    os.makedirs(d, exist_ok=True)
    for name, src, opts, _ in CLIPS:
        path = os.path.join(d, name)
        if not os.path.exists(path):
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", src] + opts + [path],
                           check=True)
    return d


def decode(path, src_colorspace=None):
    """Every frame as rgb24 with PyAV, no rotation; fps and total as transformers' read_video_pyav reports them.
    src_colorspace (the BT.601 control only) overrides the colour matrix the stream declares."""
    with av.open(path) as c:
        s = c.streams.video[0]
        fps = float(s.average_rate)
        if src_colorspace is None:
            frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)])
        else:
            frames = np.stack([f.reformat(format="rgb24", src_colorspace=src_colorspace).to_ndarray()
                               for f in c.decode(s)])
    return frames, fps


def metadata(frames, fps):
    from transformers.video_utils import VideoMetadata
    return VideoMetadata(total_num_frames=int(frames.shape[0]), fps=fps, width=int(frames.shape[2]),
                         height=int(frames.shape[1]))


def video_processor(family):
    if family == "qwen3-vl":
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
        return Qwen3VLVideoProcessor()
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    return Qwen2VLVideoProcessor(do_sample_frames=True)


def processor(family, model_dir):
    """The family's processor class, as AutoProcessor builds it, with the folder's tokenizer and chat template and the
    video processor at its class defaults (the folders carry no video_preprocessor_config.json; without one a 5.x
    AutoProcessor may read preprocessor_config.json's image bounds for video, so the video processor is built here)."""
    from transformers import AutoProcessor
    auto = AutoProcessor.from_pretrained(model_dir)
    vp = video_processor(family)
    proc = type(auto)(image_processor=auto.image_processor, tokenizer=auto.tokenizer, video_processor=vp,
                      chat_template=auto.chat_template)
    return auto, proc, vp


def run_stoker(stoker, args):
    p = subprocess.run([stoker, "encode"] + args, capture_output=True, text=True)
    return p.returncode, (p.stderr.strip() or p.stdout.strip())[-1500:]


def load(out, name):
    p = os.path.join(out, name + ".npy")
    return np.load(p) if os.path.exists(p) else None


def rope(model, family, input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None):
    fn = model.model.get_rope_index
    params = inspect.signature(fn).parameters
    kw = dict(input_ids=input_ids, image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw,
              attention_mask=torch.ones_like(input_ids))
    if "second_per_grid_ts" in params:
        kw["second_per_grid_ts"] = second_per_grid_ts
    if MM_TOKEN_TYPES and "mm_token_type_ids" in params:
        kw["mm_token_type_ids"] = torch.from_numpy(mm_rule(input_ids.numpy()))
    pos, _ = fn(**{k: v for k, v in kw.items() if k in params})
    return pos


BT709_CLIP = CLIPS[1][0]
OTHER = {"4.57": "5.18", "5.18": "4.57"}


def other_release(out, hf, hpos):
    """Control: Stoker's encode of the same sample for the other release (when this work folder has it) against this
    release's transformers. The arrays listed differ, so the check tells the releases apart."""
    other = out.replace(os.sep.join(["venc", RELEASE]), os.sep.join(["venc", OTHER[RELEASE]]))
    if not os.path.exists(os.path.join(other, "input_ids.npy")):
        return None
    pairs = [("pixel_values_videos", hf["pixel_values_videos"].numpy()), ("video_grid_thw", hf["video_grid_thw"].numpy()),
             ("input_ids", hf["input_ids"][0].numpy())]
    if "second_per_grid_ts" in hf:
        pairs.append(("second_per_grid_ts", np.asarray(hf["second_per_grid_ts"], dtype=np.float32)))
    differ = [n for n, a in pairs if not compare_exact(n, load(other, n), a)["equal"]]
    if hpos is not None:
        sp = load(other, "position_ids")
        if sp.shape != tuple(hpos.shape[::2]) or not np.array_equal(sp, hpos.numpy()[:, 0, :]):
            differ.append("position_ids")
    return differ


def bt601_control(proc, text, path, out, kw):
    """Control: the BT.709-tagged clip decoded as if it were BT.601 (what a decoder that ignores the tag gives) and
    put through the same processor must differ from Stoker's pixel_values_videos: the check sees the matrix."""
    frames, fps = decode(path, src_colorspace="ITU601")
    hf = proc(text=[text], videos=[frames], video_metadata=[metadata(frames, fps)], return_tensors="pt", **kw)
    c = compare_exact("pixel_values_videos", load(out, "pixel_values_videos"), hf["pixel_values_videos"].numpy())
    return {k: c.get(k) for k in ("equal", "differing", "first_index", "stoker_value", "hf_value", "max_abs_diff")}


def video_rows(args, work, families):
    clips = make_clips(work)
    decoded = {name: decode(os.path.join(clips, name)) for name, *_ in CLIPS}
    rows, tasks = [], []
    setups = {}
    for family in families:
        model_dir = model_folders.write(os.path.join(work, "models", family), family)
        auto, proc, vp = processor(family, model_dir)
        size = dict(vp.size)
        setups[family] = dict(proc=proc, vp=vp, size=size, processor=type(proc).__name__,
                              video_processor=type(vp).__name__, fps=getattr(vp, "fps", None),
                              min_frames=getattr(vp, "min_frames", None), max_frames=getattr(vp, "max_frames", None))
        for name, *_ in CLIPS:
            d = os.path.join(work, "vsamples", family, name.split("_")[0])
            os.makedirs(d, exist_ok=True)
            check.link(os.path.join(clips, name), os.path.join(d, name))
            msgs = [check.user({"type": "video", "video": name}, check.txt("What happens in this clip?")),
                    check.assistant("Coloured shapes move across a test pattern.")]
            sample = os.path.join(d, "sample.json")
            with open(sample, "w") as f:
                json.dump({"id": family + "_" + name, "messages": msgs}, f)
            out = os.path.join(work, "venc", RELEASE, family, name.split("_")[0])
            cmd = ["--model", model_dir, "--sample", sample, "--out", out, "--transformers", RELEASE,
                   "--max-seq-len", "0", "--video-sampler", "hf", "--video-fps", "2",
                   "--video-min-pixels", str(size["shortest_edge"]), "--video-max-pixels", str(size["longest_edge"])]
            tasks.append((family, name, msgs, d, out, cmd))
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        codes = list(ex.map(lambda t: run_stoker(args.stoker, t[5]), tasks))
    enc_s = round(time.time() - t0, 1)
    models = {f: tiny_model(f) for f in families}
    for (family, name, msgs, d, out, cmd), (rc, err) in zip(tasks, codes):
        s = setups[family]
        r = {"check": "video", "family": family, "clip": name, "release": RELEASE,
             "stoker": "./stoker encode " + " ".join(cmd), "stoker_exit": rc}
        try:
            frames, fps = decoded[name]
            r.update(decoded_frames=int(frames.shape[0]), average_fps=fps)
            msgs_abs = json.loads(json.dumps(msgs))
            msgs_abs[0]["content"][0]["video"] = os.path.join(d, name)
            text = s["proc"].apply_chat_template(msgs_abs, tokenize=False)
            kw = dict(do_sample_frames=True)
            if family != "qwen3-vl":
                kw["fps"] = 2.0
            try:
                hf = s["proc"](text=[text], videos=[frames], video_metadata=[metadata(frames, fps)],
                               return_tensors="pt", **kw)
            except Exception as e:
                r["hf_error"] = first_line(e)
                hf = None
            if hf is None or rc != 0:
                r["pass"] = hf is None and rc != 0  # both refuse: agreement
                r["stoker_error"] = err if rc else None
                rows.append(r)
                continue
            comps = [compare_exact("pixel_values_videos", load(out, "pixel_values_videos"),
                                   hf["pixel_values_videos"].numpy()),
                     compare_exact("video_grid_thw", load(out, "video_grid_thw"), hf["video_grid_thw"].numpy()),
                     compare_exact("input_ids", load(out, "input_ids"), hf["input_ids"][0].numpy())]
            if family == "qwen2.5-vl":
                sp = hf["second_per_grid_ts"]
                sp = sp.numpy() if hasattr(sp, "numpy") else np.asarray(sp, dtype=np.float32)
                comps.append(compare_exact("second_per_grid_ts", load(out, "second_per_grid_ts"), sp))
            r["compared"] = comps
            r["grid"] = hf["video_grid_thw"].numpy().tolist()
            r["tokens"] = int(hf["input_ids"].shape[1])
            hpos = None
            try:
                sp = hf.get("second_per_grid_ts")
                if sp is not None and not torch.is_tensor(sp):
                    sp = torch.tensor(sp, dtype=torch.float32)
                hpos = rope(models[family], family, hf["input_ids"], video_grid_thw=hf["video_grid_thw"],
                            second_per_grid_ts=sp)
                spos = load(out, "position_ids")
                r["positions"] = compare_positions(spos[:, None, :] if spos.ndim == 2 else spos, hpos.numpy(),
                                                   np.ones((1, hpos.shape[-1]), dtype=np.int64))
            except Exception as e:
                r["positions"] = {"error": first_line(e), "traceback": traceback.format_exc()[-1500:]}
            r["pass"] = all(c["equal"] for c in comps) and bool(r["positions"].get("equal_attended"))
            r["other_release"] = other_release(out, hf, hpos)
            if name == BT709_CLIP:
                r["control_bt601"] = bt601_control(s["proc"], text, os.path.join(d, name), out, kw)
                r["pass"] = r["pass"] and not r["control_bt601"]["equal"]  # a check blind to the matrix fails
        except Exception as e:
            r.update(error=first_line(e), traceback=traceback.format_exc()[-2000:], **{"pass": False})
        rows.append(r)
        print(row_line(r), flush=True)
    info = {f: {k: v for k, v in s.items() if k not in ("proc", "vp")} for f, s in setups.items()}
    return rows, {"setups": info, "encode_seconds": enc_s, "encodes": len(tasks)}


def image_rows(args, work, families):
    from transformers.image_utils import load_image
    from PIL import Image
    groups = [("photos", [c for c in check.photo_cases() if c[2]]), ("exif", check.exif_cases())]
    cases = check.write_cases(os.path.join(work, "icases"), groups)
    tasks, procs = [], {}
    for family in families:
        model_dir = model_folders.write(os.path.join(work, "models", family), family)
        from transformers import AutoProcessor
        procs[family] = AutoProcessor.from_pretrained(model_dir)
        for case in cases:
            out = os.path.join(work, "ienc", RELEASE, family, case["id"])
            cmd = ["--model", model_dir, "--sample", case["sample"], "--out", out, "--exif", case["exif"],
                   "--max-seq-len", "0", "--image-backend", "torchvision", "--transformers", RELEASE]
            tasks.append((family, case, out, cmd))
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        codes = list(ex.map(lambda t: run_stoker(args.stoker, t[3]), tasks))
    enc_s = round(time.time() - t0, 1)
    rows = []
    for (family, case, out, cmd), (rc, err) in zip(tasks, codes):
        proc = procs[family]
        r = {"check": "image-torchvision", "family": family, "case": case["id"], "release": RELEASE,
             "image_processor": type(proc.image_processor).__name__, "stoker_exit": rc}
        try:
            images = [load_image(p) if case["exif"] == "apply" else Image.open(p) for p in case["images"]]
            text = proc.apply_chat_template(case["messages"], tokenize=False)
            hf = proc(text=[text], images=images, return_tensors="pt")
            if rc != 0:
                r.update(stoker_error=err, **{"pass": False})
            else:
                comps = [compare_exact("input_ids", load(out, "input_ids"), hf["input_ids"][0].numpy()),
                         compare_exact("pixel_values", load(out, "pixel_values"), hf["pixel_values"].numpy()),
                         compare_exact("image_grid_thw", load(out, "image_grid_thw"), hf["image_grid_thw"].numpy())]
                r["compared"] = comps
                r["pass"] = all(c["equal"] for c in comps)
        except Exception as e:
            r.update(error=first_line(e), traceback=traceback.format_exc()[-2000:], **{"pass": False})
        rows.append(r)
        print(row_line(r), flush=True)
    info = {f: {"processor": type(p).__name__, "image_processor": type(p.image_processor).__name__,
                "size": dict(p.image_processor.size)} for f, p in procs.items()}
    return rows, {"setups": info, "encode_seconds": enc_s, "encodes": len(tasks)}


def row_line(r):
    what = r.get("clip") or r.get("case")
    if "compared" not in r:
        detail = r.get("error") or f"hf: {r.get('hf_error')}; stoker exit {r['stoker_exit']}: {r.get('stoker_error')}"
    else:
        bad = [c for c in r["compared"] if not c["equal"]]
        detail = "; ".join(f"{c['tensor']} {c.get('why')} first {c.get('first_index')} stoker {c.get('stoker_value')} "
                           f"hf {c.get('hf_value')} ({c.get('differing')} differ, max |d| {c.get('max_abs_diff')})"
                           if c.get("why") == "values" else f"{c['tensor']} {c.get('why')} {c['stoker_shape']} "
                           f"{c['hf_shape']} {c['stoker_dtype']} {c['hf_dtype']}" for c in bad)
        pos = r.get("positions")
        if pos is not None and not pos.get("equal_attended"):
            detail += f"; position_ids {pos}"
    return f"{r['release']} {r['check']} {r['family']} {what}: {'PASS' if r.get('pass') else 'FAIL'} {detail}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--stoker", default=os.path.join(ROOT, "stoker"))
    ap.add_argument("--families", default=",".join(model_folders.FAMILIES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-video", action="store_true")
    ap.add_argument("--skip-images", action="store_true")
    args = ap.parse_args()
    if RELEASE not in ("4.57", "5.18"):
        sys.exit(f"transformers {transformers.__version__}: stoker encode --transformers takes 4.57 or 5.18")
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    families = args.families.split(",")
    import PIL
    res = {"transformers": transformers.__version__, "torch": torch.__version__, "av": av.__version__,
           "pillow": PIL.__version__, "numpy": np.__version__, "rows": []}
    t0 = time.time()
    if not args.skip_video:
        rows, info = video_rows(args, work, families)
        res["rows"] += rows
        res["video"] = info
    if not args.skip_images:
        rows, info = image_rows(args, work, families)
        res["rows"] += rows
        res["images"] = info
    res["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(work, f"video-check-{RELEASE}.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    n_pass = sum(1 for r in res["rows"] if r.get("pass"))
    print(f"transformers {transformers.__version__}: {n_pass}/{len(res['rows'])} rows passed in {res['seconds']} s",
          flush=True)
    sys.exit(0 if n_pass == len(res["rows"]) else 1)


if __name__ == "__main__":
    main()
