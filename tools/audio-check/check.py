"""Stoker's audio decode and Whisper log-mel against librosa 0.11 + transformers 5.18.0's WhisperFeatureExtractor
(numpy path), on clips made here with the ffmpeg command: wav, flac, mp3 and aac-in-mp4; mono and stereo;
8, 22.05, 44.1 and 48 kHz. Run by hand in a venv that has transformers 5.18.0, librosa 0.11, soxr, soundfile and
audioread, and no torch (README.md):

    python tools/audio-check/check.py WORK_DIR [--seconds 3]

For each clip it states
  * same PCM: the max |Δ| of the features when both sides get librosa's PCM (the feature rule alone);
  * own decode: the max |Δ| of the PCM and of the features when each side decodes and resamples itself
    (librosa: libsndfile or audioread+ffmpeg, soxr_hq; Stoker: libavcodec, libswresample's soxr at 20 bits, and
    its own swr filter), and the sample-count difference;
  * window: the same for offset 0.37 s, duration 1.23 s (librosa.load's offset/duration, Options.window).
Features are compared over the frames both sides have, under Qwen2-Audio's rule (padded to 30 s, the valid frames)
and Qwen3-Omni's (the clip alone).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import librosa
import transformers
from transformers import WhisperFeatureExtractor

ROOT = Path(__file__).resolve().parents[2]
FORMATS = {"wav": ["-c:a", "pcm_s16le"], "flac": ["-c:a", "flac"], "mp3": ["-c:a", "libmp3lame", "-b:a", "128k"],
           "mp4": ["-c:a", "aac", "-b:a", "128k"]}
RATES = [8000, 22050, 44100, 48000]
WINDOW = (0.37, 1.23)  # offset, duration in seconds


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{cmd[:6]}... exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def make_clip(work, fmt, channels, rate, seconds):
    name = f"{fmt}_{'stereo' if channels == 2 else 'mono'}_{rate}"
    out = work / f"{name}.{fmt}"
    expr = "0.4*sin(2*PI*(200+300*t)*t)+0.05*(random(0)-0.5)"
    if channels == 2:
        expr += "|0.3*sin(2*PI*523*t)*(1+0.5*sin(2*PI*3*t))"
    args = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    if fmt == "mp4":  # the audio track of a small video, as use_audio_in_video reads it
        args += ["-f", "lavfi", "-i", f"testsrc=size=64x64:rate=10:duration={seconds}"]
    args += ["-f", "lavfi", "-i", f"aevalsrc={expr}:s={rate}:d={seconds}"]
    if fmt == "mp4":
        args += ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-shortest"]
    args += ["-ac", str(channels), "-ar", str(rate)] + FORMATS[fmt] + [str(out)]
    run(args)
    return name, out


def extractor(chunk):
    return WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=chunk,
                                   n_fft=400, padding_value=0.0, dither=0.0, return_attention_mask=True)


def ref_features(pcm, family):
    if family == "qwen2-audio":
        r = extractor(30)(pcm, sampling_rate=16000, padding="max_length", return_attention_mask=True)
        valid = int(r["attention_mask"][0].sum())
        return r["input_features"][0][:, :valid]
    r = extractor(300)(pcm, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True)
    return r["input_features"][0]


def diff(a, b):
    n = min(a.shape[-1], b.shape[-1])
    return float(np.abs(a[..., :n].astype(np.float64) - b[..., :n]).max()) if n else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("work", type=Path)
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    try:
        import torch  # noqa: F401
        sys.exit("torch is installed: WhisperFeatureExtractor would take its torch path")
    except ImportError:
        pass
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    clips, manifest = [], []
    for fmt in FORMATS:
        for channels in (1, 2):
            for rate in RATES:
                name, path = make_clip(work, fmt, channels, rate, a.seconds)
                ref = librosa.load(str(path), sr=16000, mono=True)[0].astype(np.float32)
                np.save(work / f"{name}.ref_pcm.npy", ref)
                clips.append((name, path, ref))
                entry = {"name": name, "path": str(path), "ref_pcm": f"{name}.ref_pcm.npy"}
                # offset/duration as the Qwen utilities pass them to librosa.load
                w = librosa.load(str(path), sr=16000, mono=True, offset=WINDOW[0], duration=WINDOW[1])[0]
                np.save(work / f"{name}.ref_window.npy", w.astype(np.float32))
                entry.update(offset=WINDOW[0], duration=WINDOW[1])
                manifest.append(entry)
    (work / "manifest.json").write_text(json.dumps(manifest))
    cp = work / "classpath.txt"
    run(["mvn", "-B", "-o", "-q", "test-compile", "dependency:build-classpath", "-pl", "stoker-audio", "-am",
         f"-Dmdep.outputFile={cp}"], cwd=ROOT)
    classpath = ":".join([str(ROOT / "stoker-audio/target/test-classes"), str(ROOT / "stoker-audio/target/classes"),
                          str(ROOT / "stoker-video/target/classes"), str(ROOT / "stoker-core/target/classes"),
                          cp.read_text().strip()])
    run(["java", "--enable-native-access=ALL-UNNAMED", "-cp", classpath, "dev.stoker.audio.AudioCheckMain",
         str(work / "manifest.json")])
    rows = []
    for name, path, ref in clips:
        row = {"clip": name, "ref_samples": len(ref)}
        for fam in ("qwen2-audio", "qwen3-omni"):
            rf = ref_features(ref, fam)
            row[f"same_pcm_{fam}"] = diff(rf, np.load(work / f"{name}.java_feat_refpcm_{fam}.npy"))
            for tag in ("soxr_hq", "swr"):
                row[f"own_{tag}_{fam}"] = diff(rf, np.load(work / f"{name}.java_feat_{tag}_{fam}.npy"))
        for tag in ("soxr_hq", "swr"):
            j = np.load(work / f"{name}.java_pcm_{tag}.npy")
            n = min(len(j), len(ref))
            row[f"pcm_{tag}"] = float(np.abs(j[:n].astype(np.float64) - ref[:n]).max())
            row[f"len_{tag}"] = len(j) - len(ref)
        jw, rw = np.load(work / f"{name}.java_pcm_window.npy"), np.load(work / f"{name}.ref_window.npy")
        n = min(len(jw), len(rw))
        row["window_len"] = len(jw) - len(rw)
        row["window_pcm"] = float(np.abs(jw[:n].astype(np.float64) - rw[:n]).max())
        rows.append(row)
    (work / "results.json").write_text(json.dumps(rows, indent=1))
    print(f"transformers {transformers.__version__}, librosa {librosa.__version__}, numpy {np.__version__}")
    cols = ["clip", "same_pcm_qwen2-audio", "same_pcm_qwen3-omni", "pcm_soxr_hq", "len_soxr_hq",
            "own_soxr_hq_qwen2-audio", "own_soxr_hq_qwen3-omni", "pcm_swr", "len_swr", "own_swr_qwen3-omni", "window_len", "window_pcm"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
