"""`stoker encode`'s audio features against transformers' WhisperFeatureExtractor, as each audio family's processor calls it
(issue 32): the layout of several clips (N, 128, T), the padding (`--audio-pad hf`: Qwen2-Audio "max_length" 30 s,
Qwen2.5-Omni "max_length" 300 s, Qwen3-Omni padding=True / truncation=False), the int32 mask, and that the valid layout's
`input_features[mask]` equals the padded one's.

Run from the repository root with a Python that has transformers (5.18.0; numpy path, no torch needed) and numpy:

    /tmp/venv-omni/bin/python tools/hf-check/audio_encode_check.py --work /tmp/omni-hf

It makes two 16 kHz mono WAV clips with the ffmpeg command (2.5 s and 16,001 samples: one sample past a frame edge, so a
clip beside a longer one keeps ceil(n/160) frames) and one two-clip sample, runs `./stoker encode` once per family and
mode, reads the WAV PCM as librosa does for 16 kHz s16 mono (int16 / 32768, no resampling), and compares. Exit status 0
when every row holds. Not part of `./stoker test` (it needs transformers).
"""
import argparse
import json
import os
import subprocess
import sys
import wave

import numpy as np
from transformers import WhisperFeatureExtractor

CASES = [  # family, chunk_length, the processor's padding arguments
    ("qwen2-audio", 30, dict(padding="max_length")),
    ("qwen2.5-omni", 300, dict(padding="max_length")),
    ("qwen3-omni", 300, dict(padding=True, truncation=False)),
]


def pcm(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--stoker", default="./stoker")
    a = ap.parse_args()
    clips = os.path.join(a.work, "clips")
    os.makedirs(clips, exist_ok=True)
    for name, duration, freq in (("a.wav", "2.5", 440), ("b.wav", "1.0000625", 220)):
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"sine=frequency={freq}:sample_rate=16000:duration={duration}", "-ac", "1", "-c:a", "pcm_s16le",
                        os.path.join(clips, name)], check=True)
    sample = os.path.join(a.work, "s.json")
    with open(sample, "w") as f:
        json.dump({"messages": [{"role": "user", "content": "<audio><audio>Which is longer?"},
                                {"role": "assistant", "content": "The first."}],
                   "audios": ["clips/a.wav", "clips/b.wav"]}, f)
    audio = [pcm(os.path.join(clips, "a.wav")), pcm(os.path.join(clips, "b.wav"))]
    ok = True
    for family, chunk, kw in CASES:
        out = {}
        for pad in ("hf", "valid"):
            out[pad] = os.path.join(a.work, f"{family}-{pad}")
            subprocess.run([a.stoker, "encode", "--processor", family, "--audio-pad", pad, "--sample", sample, "--out", out[pad]],
                           check=True)
        ex = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=chunk, n_fft=400,
                                     padding_value=0.0, dither=0.0)
        r = ex(audio, sampling_rate=16000, return_attention_mask=True, return_tensors="np", **kw)
        f, m = r["input_features"], r["attention_mask"]
        sf = np.load(os.path.join(out["hf"], "input_features.npy"))
        sm = np.load(os.path.join(out["hf"], "feature_attention_mask.npy"))
        same = f.shape == sf.shape and f.dtype == sf.dtype and m.dtype == sm.dtype and np.array_equal(f, sf) and np.array_equal(m, sm)
        vf = np.load(os.path.join(out["valid"], "input_features.npy"))
        vm = np.load(os.path.join(out["valid"], "feature_attention_mask.npy"))
        masked = np.array_equal(vf.transpose(0, 2, 1)[vm.astype(bool)], f.transpose(0, 2, 1)[m.astype(bool)])
        print(f"{family}: hf {f.shape} {f.dtype}, mask {m.dtype} sums {m.sum(1).tolist()}; stoker --audio-pad hf {sf.shape} "
              f"{sf.dtype}, mask {sm.dtype} sums {sm.sum(1).tolist()}: {'bit for bit' if same else 'DIFFERENT'}; "
              f"--audio-pad valid {vf.shape}, input_features[mask] {'equal' if masked else 'DIFFERENT'}")
        ok &= same and masked
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
