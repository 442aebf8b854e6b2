"""Qwen3-Omni with images and videos (issue 32): `stoker encode --processor qwen3-omni` against the REAL transformers
5.18.0 `Qwen3OmniMoeProcessor` and its thinker's `get_rope_index`, and the fixture stoker-cli's Qwen3OmniVisionCliTest
holds Stoker to without Python.

Run from the repository root with a Python that has transformers 5.18.0, torch, torchvision, PyAV, Pillow, NumPy (a venv
from the offline mirror, see make_venvs.sh; CPU, no weights, under a minute):

    /tmp/venv-omni3v/bin/python tools/hf-check/omni3_vision_check.py --work /tmp/omni3v/check \
        [--fixture stoker-cli/src/test/resources/dev/stoker/cli/omni3-vision-fixture.json] [--photo ../shared/photos/X.jpg]

The media are made here with the ffmpeg CLI exactly as the Java test makes them (a PNG of testsrc2 at 200x150; an H.264
video of testsrc2 at 160x120, 10 fps, 2 s (lossless, -qp 0: the decoded frames do not hang on the encoder's release) with a 16 kHz mono PCM track in Matroska, so that both sides read the same
PCM and the audio features need no resampler), plus, for RESULTS.md only, a real photo.

transformers' side, as the published folder builds it: `Qwen2VLImageProcessorPil` and the torchvision
`Qwen2VLImageProcessor`, and `Qwen2VLVideoProcessor`, each `from_pretrained` on a folder holding the published
`preprocessor_config.json` of Qwen/Qwen3-Omni-30B-A3B-Instruct (patch 16, merge 2, temporal 2, mean/std 0.5, 3,136 …
12,845,056 pixels; the Hub folder has no video_preprocessor_config.json, so the video processor reads the same file),
WhisperFeatureExtractor (chunk 300, dither 0), and a Qwen2TokenizerFast of stoker-text's bundled vocabulary with the
family's added tokens (audio_text_check.py's). The chat is rendered with audio_text_check.QWEN3_TEMPLATE (Stoker's
rendering: the published template was not available). Videos: PyAV decodes every frame (rgb24) and the processor
samples them (`do_sample_frames=True`, `fps=2.0` passed, which is also what its `video_second_per_grid` reads; the size
is the processor's own call default, 128·32·32 … 768·32·32 per frame). Positions: the thinker's get_rope_index on a
stand-in model holding the published ids (audio_text_check.stand_in_model).

Stoker's side: `./stoker encode --processor qwen3-omni --sample … --out …` (--use-audio-in-video for the last case).
Compared: input_ids (exact), image_grid_thw, video_grid_thw, video_second_per_grid (exact), position_ids (float32 bits),
pixel_values and pixel_values_videos (max |Δ|), input_features[mask] (max |Δ|). Writes DIR/omni3-vision.json and, with
--fixture, the fixture (ids, grids, spg, position bits, and SHA-256 + sum of the pixel tensors of the PIL path).
Exit status 0 when ids, grids and positions are exact and pixels are within 1e-6.

`--family qwen2.5-omni` runs the same cases against the real `Qwen2_5OmniProcessor` (the published folder of
Qwen/Qwen2.5-Omni-7B: `Qwen2VLImageProcessor` at patch 14 with CLIP's mean and std, 3,136 … 12,845,056 pixels; the
processor's own video size at every call, 128·28·28 … 768·28·28; the published chat template bundled in stoker-text)
and the thinker's integer `get_rope_index`; no fixture is written for it.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import av
import numpy as np
import torch
import transformers
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import audio_text_check as atc  # noqa: E402

# Hub Qwen/Qwen3-Omni-30B-A3B-Instruct preprocessor_config.json (revision 26291f79), its image processor keys and the
# Whisper keys the processor reads
PUBLISHED = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160, "n_fft": 400,
             "n_samples": 4800000, "nb_max_frames": 30000, "chunk_length": 300, "sampling_rate": 16000, "dither": 0.0,
             "padding_value": 0.0, "padding_side": "right", "return_attention_mask": True,
             "image_processor_type": "Qwen2VLImageProcessor", "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056,
             "processor_class": "Qwen3OmniMoeProcessor"}

# ffmpeg arguments: the Java test (Qwen3OmniVisionCliTest) makes the same files with the same arguments
MEDIA = {
    "img.png": ["-f", "lavfi", "-i", "testsrc2=size=200x150:rate=1:duration=1", "-frames:v", "1"],
    "vid.mkv": ["-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10:duration=2", "-f", "lavfi", "-i",
                "sine=frequency=440:sample_rate=16000:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-qp", "0", "-pix_fmt",
                "yuv420p", "-c:a", "pcm_s16le", "-ac", "1", "-shortest"],
}
# Hub Qwen/Qwen2.5-Omni-7B preprocessor_config.json: the same Whisper keys, Qwen2VLImageProcessor at patch 14 with CLIP's
# mean and std (the Qwen2.5-VL image processor settings)
PUBLISHED_25 = {**PUBLISHED, "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "patch_size": 14, "processor_class": "Qwen2_5OmniProcessor"}
FAMILY = "qwen3-omni"

CASES = [  # name, record (Stoker's sample file), kinds, use_audio_in_video
    ("image", {"messages": [{"role": "user", "content": "<image>What is shown?"}, {"role": "assistant", "content": "Bars."}],
               "images": ["img.png"]}, False),
    ("video", {"messages": [{"role": "user", "content": "<video>What moves?"}, {"role": "assistant", "content": "A pattern."}],
               "videos": ["vid.mkv"]}, False),
    ("video-audio", {"messages": [{"role": "user", "content": "<video>What is heard?"}, {"role": "assistant", "content": "A tone."}],
                     "videos": ["vid.mkv"]}, True),
]


def ffmpeg(out, args):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args, out], check=True)


def decode_video(path):
    with av.open(path) as c:
        s = c.streams.video[0]
        fps = float(s.average_rate)
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)])
    return frames, fps


def decode_pcm(path):
    with av.open(path) as c:
        s = c.streams.audio[0]
        out = [f.to_ndarray().reshape(-1) for f in c.decode(s)]
    return np.concatenate(out).astype(np.float32) / 32768.0


def processor(work, backend):
    from tokenizers import Tokenizer
    import gzip
    from transformers import AutoImageProcessor, AutoVideoProcessor, Qwen2TokenizerFast, WhisperFeatureExtractor
    folder = os.path.join(work, "published")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as fh:
        json.dump(PUBLISHED if FAMILY == "qwen3-omni" else PUBLISHED_25, fh)
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump({"model_type": "qwen3_omni_moe" if FAMILY == "qwen3-omni" else "qwen2_5_omni"}, fh)
    f = atc.FAMILIES[FAMILY]
    spec = json.loads(gzip.open(atc.BUNDLED).read())
    if FAMILY == "qwen3-omni":
        fill = {i: "<|filler_%d|>" % i for i in range(151671, 151675)}
        for i, c in sorted({**atc.ADDED["qwen3-omni"], **fill}.items()):
            spec["added_tokens"].append({"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                                         "normalized": False, "special": True})
    else:  # the bundled vocabulary's added tokens renamed as Qwen2.5-Omni's (audio_text_check's end-to-end cases)
        names = dict(atc.ADDED["qwen2.5-omni"])
        for t in spec["added_tokens"]:
            if t["id"] in names:
                t["content"] = names[t["id"]]
    extra = {"image_token": f["image"][0], "audio_token": f["audio"][0], "video_token": f["video"][0],
             "vision_bos_token": f["vbos"][0], "vision_eos_token": f["veos"][0], "audio_bos_token": f["abos"][0],
             "audio_eos_token": f["aeos"][0]}
    tok = Qwen2TokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), extra_special_tokens=extra)
    ip = AutoImageProcessor.from_pretrained(folder, backend=backend)
    vp = AutoVideoProcessor.from_pretrained(folder)
    fe = WhisperFeatureExtractor.from_pretrained(folder)
    template = atc.QWEN3_TEMPLATE
    if FAMILY == "qwen2.5-omni":
        with open(os.path.join(ROOT, "stoker-text/src/test/resources/dev/stoker/text/omni/qwen2.5-omni.jinja")) as fh:
            template = fh.read()
    return f["proc"](image_processor=ip, video_processor=vp, feature_extractor=fe, tokenizer=tok,
                     chat_template=template), type(ip).__name__, type(vp).__name__


def hf_case(proc, work, record, aiv, photo=None):
    f = atc.FAMILIES[FAMILY]
    content = []
    for m in record["messages"]:
        parts = []
        text = m["content"]
        for tag, kind in (("<image>", "image"), ("<video>", "video")):
            if text.startswith(tag):
                parts.append({"type": kind})
                text = text[len(tag):]
        parts.append({"type": "text", "text": text})
        content.append({"role": m["role"], "content": parts})
    text = proc.apply_chat_template(content, tokenize=False)
    kw = dict(return_tensors="pt")
    if "images" in record:
        kw["images"] = [Image.open(os.path.join(work, photo or record["images"][0])).convert("RGB")]
    if "videos" in record:
        frames, fps = decode_video(os.path.join(work, record["videos"][0]))
        from transformers.video_utils import VideoMetadata
        kw.update(videos=[frames], video_metadata=[VideoMetadata(total_num_frames=int(frames.shape[0]), fps=fps,
                                                                 width=int(frames.shape[2]), height=int(frames.shape[1]))],
                  do_sample_frames=True, fps=2.0, use_audio_in_video=aiv)
        if aiv:
            kw["audio"] = [decode_pcm(os.path.join(work, record["videos"][0]))]
    got = proc(text=[text], **kw)
    ids = got["input_ids"]
    ig = got.get("image_grid_thw")
    vg = got.get("video_grid_thw")
    spg = torch.as_tensor(got["video_second_per_grid"]) if "video_second_per_grid" in got else None
    frames = got["feature_attention_mask"].sum(-1) if "feature_attention_mask" in got else None
    pos, _ = f["model"].get_rope_index(atc.stand_in_model(f), input_ids=ids, image_grid_thw=ig, video_grid_thw=vg,
                                        attention_mask=torch.ones_like(ids), use_audio_in_video=aiv, audio_seqlens=frames,
                                        second_per_grids=spg)
    return got, pos[:, 0, :].float().numpy()


def stoker_case(work, stoker, name, record, aiv, image=None, backend="pil"):
    rec = dict(record)
    if image:
        rec["images"] = [image]
    sample = os.path.join(work, name + ".json")
    with open(sample, "w") as fh:
        json.dump(rec, fh)
    out = os.path.join(work, "out-" + name)
    out += "-" + backend
    # --exif ignore: the processor is handed Image.open's pixels, unrotated
    args = [stoker, "encode", "--processor", FAMILY, "--sample", sample, "--out", out, "--exif", "ignore",
            "--image-backend", backend, "--max-seq-len", "0"]
    if aiv:
        args.append("--use-audio-in-video")
    subprocess.run(args, check=True)
    return {k[:-4]: np.load(os.path.join(out, k)) for k in os.listdir(out) if k.endswith(".npy")}


def maxdiff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return "shape %s vs %s" % (list(a.shape), list(b.shape))
    return float(np.abs(a - b).max()) if a.size else 0.0


def digest(a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest(), "sum": float(a.astype(np.float64).sum())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--stoker", default=os.path.join(ROOT, "stoker"))
    ap.add_argument("--fixture")
    ap.add_argument("--photo")
    ap.add_argument("--family", default="qwen3-omni", choices=["qwen3-omni", "qwen2.5-omni"])
    a = ap.parse_args()
    global FAMILY
    FAMILY = a.family
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    for name, args in MEDIA.items():
        ffmpeg(os.path.join(work, name), args)
    rows, ok, fixture_cases = [], True, []
    backends = ["pil"]
    try:
        import torchvision  # noqa: F401
        backends.append("torchvision")
    except ImportError:
        pass
    cases = [(n, r, aiv, None) for n, r, aiv in CASES]
    if a.photo:  # copied under the work folder: a sample's images stay under its root
        import shutil
        shutil.copyfile(a.photo, os.path.join(work, "photo" + os.path.splitext(a.photo)[1]))
        cases.append(("photo", CASES[0][1], False, "photo" + os.path.splitext(a.photo)[1]))
    for backend in backends:
        proc, ipn, vpn = processor(work, backend)
        for name, record, aiv, photo in cases:
            if backend != "pil" and "images" not in record:
                continue
            got, pos = hf_case(proc, work, record, aiv, photo)
            s = stoker_case(work, a.stoker, name, record, aiv, photo, backend)
            row = {"case": name, "backend": backend, "image_processor": ipn, "video_processor": vpn}
            row["input_ids"] = "exact" if np.array_equal(got["input_ids"][0].numpy(), s["input_ids"]) else "DIFFERENT"
            spos = s["position_ids"].astype(np.float32)
            row["position_ids"] = "exact (float32 bits)" if (spos.shape == pos.shape and np.array_equal(
                spos.view(np.int32), pos.astype(np.float32).view(np.int32))) else "DIFFERENT"
            for key, skey in (("image_grid_thw", "image_grid_thw"), ("video_grid_thw", "video_grid_thw")):
                if key in got:
                    row[key] = got[key].tolist()
                    row[key + "_equal"] = np.array_equal(got[key].numpy(), s.get(skey))
                    ok &= row[key + "_equal"]
            if "video_second_per_grid" in got:
                hs = np.asarray(got["video_second_per_grid"], dtype=np.float32)
                row["video_second_per_grid"] = hs.tolist()
                row["video_second_per_grid_equal"] = np.array_equal(hs, s.get("second_per_grid_ts"))
                ok &= row["video_second_per_grid_equal"]
            for key in ("pixel_values", "pixel_values_videos"):
                if key in got:
                    row[key + "_max_abs_diff"] = maxdiff(got[key].numpy(), s.get(key))
                    d = row[key + "_max_abs_diff"]
                    ok &= isinstance(d, float) and d <= 1e-6
            if "input_features" in got:
                hm = got["feature_attention_mask"].numpy().astype(bool)
                hf_valid = got["input_features"].numpy().transpose(0, 2, 1)[hm]
                sv = s["input_features"].transpose(0, 2, 1)[s["feature_attention_mask"].astype(bool)]
                row["input_features_valid_max_abs_diff"] = maxdiff(hf_valid, sv)
            ok &= row["input_ids"] == "exact" and row["position_ids"].startswith("exact")
            rows.append(row)
            print(json.dumps(row))
            if backend == "pil" and photo is None:
                case = {"name": name, "record": record, "use_audio_in_video": aiv,
                        "input_ids": got["input_ids"][0].tolist(),
                        "position_f32_bits": [[int(x) for x in r] for r in pos.astype(np.float32).view(np.int32)]}
                for key in ("image_grid_thw", "video_grid_thw"):
                    if key in got:
                        case[key] = got[key].tolist()
                if "video_second_per_grid" in got:
                    case["video_second_per_grid"] = [float(x) for x in np.asarray(got["video_second_per_grid"], dtype=np.float32)]
                for key in ("pixel_values", "pixel_values_videos"):
                    if key in got:
                        case[key] = digest(got[key].numpy())
                fixture_cases.append(case)
    with open(os.path.join(work, "omni3-vision.json"), "w") as fh:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "rows": rows}, fh, indent=1)
    if a.fixture:
        with open(a.fixture, "w") as fh:
            json.dump({"made_by": "tools/hf-check/omni3_vision_check.py", "transformers": transformers.__version__,
                       "torch": torch.__version__, "pyav": av.__version__, "media": MEDIA, "cases": fixture_cases}, fh, indent=1)
            fh.write("\n")
    print("ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
