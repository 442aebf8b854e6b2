"""Writes stoker-audio's committed test fixtures from the real WhisperFeatureExtractor (transformers 5.18.0, numpy
path: run without torch installed).

    python make_fixtures.py OUT_DIR     # OUT_DIR: stoker-audio/src/test/resources/dev/stoker/audio

Files (a few KB each, so that the Java tests hold the rule with no Python):
  clip_pcm.npy        int16 (3000,): a deterministic 187.5 ms clip at 16 kHz (chirp + noise + a loud end),
                      which Java reads as int16 / 32768 exactly as this script feeds it to the extractor
  qwen3_valid.npy     float32 (128, 18): Qwen3-Omni's features of the clip alone (padding=True, no padding: the
                      reflect tail), all frames valid
  qwen2_valid.npy     float32 (128, 19): Qwen2-Audio's features (padding="max_length", 30 s) at the 19 mask frames
  qwen2_padded_head.npy float32 (128, 24): the first 24 of Qwen2-Audio's 3000 padded frames
  fixtures.json       the padded frames' constant value past the head, frame and mask counts, and token counts
"""
import json
import sys
from pathlib import Path

import numpy as np
import transformers
from transformers import WhisperFeatureExtractor
from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import _get_feat_extract_output_lengths

assert transformers.__version__ == "5.18.0", transformers.__version__
try:
    import torch  # noqa: F401
    raise SystemExit("torch is installed: WhisperFeatureExtractor would take its torch path, not the numpy one")
except ImportError:
    pass


def extractor(chunk_length):
    return WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=chunk_length,
                                   n_fft=400, padding_value=0.0, dither=0.0, return_attention_mask=True)


def clip():
    rng = np.random.default_rng(20261206)
    n = 3000
    t = np.arange(n) / 16000.0
    x = 0.3 * np.sin(2 * np.pi * (200 + 3000 * t) * t) + 0.05 * rng.standard_normal(n)
    x[-400:] *= 3.0  # the loudest part at the very end: the tail rule decides the maximum
    return np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)


def qwen2_audio_tokens(l):  # processing_qwen2_audio.py: (((l - 1) // 2 + 1) - 2) // 2 + 1
    return (((l - 1) // 2 + 1) - 2) // 2 + 1


def qwen2_5_omni_tokens(l):  # processing_qwen2_5_omni.py: input_lengths = (L - 1) // 2 + 1; (input_lengths - 2) // 2 + 1
    return ((l - 1) // 2 + 1 - 2) // 2 + 1


def main(out):
    out.mkdir(parents=True, exist_ok=True)
    pcm16 = clip()
    np.save(out / "clip_pcm.npy", pcm16)
    pcm = pcm16.astype(np.float32) / np.float32(32768)

    q3 = extractor(300)(pcm, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True)
    q3f, q3m = q3["input_features"][0], q3["attention_mask"][0]
    assert q3m.all(), "a clip alone is not padded under padding=True"
    np.save(out / "qwen3_valid.npy", q3f.astype(np.float32))

    q2 = extractor(30)(pcm, sampling_rate=16000, padding="max_length", return_attention_mask=True)
    q2f, q2m = q2["input_features"][0], q2["attention_mask"][0]
    valid = int(q2m.sum())
    assert q2m[:valid].all() and not q2m[valid:].any()
    np.save(out / "qwen2_valid.npy", q2f[:, :valid].astype(np.float32))
    head = 24
    np.save(out / "qwen2_padded_head.npy", q2f[:, :head].astype(np.float32))
    tail = q2f[:, head:]
    assert (tail == tail[0, 0]).all(), "past the head every padded value is one constant"

    # Qwen3-Omni with two clips in one call: the shorter is zero-padded to the longer (5000 samples), and its
    # masked frames are then exactly Qwen2-Audio's valid frames (a zero tail either way); WhisperLogMelTest holds
    # WhisperLogMel.compute(pcm, 3000, 5000, 19) to the same array
    longer = np.concatenate([pcm, pcm[:2000]])
    b = extractor(300)([pcm, longer], sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True)
    bm = int(b["attention_mask"][0].sum())
    assert bm == valid and b["input_features"].shape[-1] == 5000 // 160
    assert np.array_equal(b["input_features"][0][:, :bm], q2f[:, :valid]), "batch-padded = max_length-padded frames"

    # mask counts straight from the extractor, for lengths around the hop and the chunk
    masks = []
    for n, chunk, padding in [(3000, 30, "max_length"), (3000, 300, "max_length"), (3000, 300, True),
                              (160, 30, "max_length"), (160, 300, True), (161, 30, "max_length"), (161, 300, True),
                              (319, 300, True), (479_999, 30, "max_length"), (480_000, 30, "max_length"),
                              (480_161, 30, "max_length"), (480_161, 300, True)]:
        x = np.zeros(n, dtype=np.float32)
        kw = dict(truncation=False) if padding is True else {}
        r = extractor(chunk)(x, sampling_rate=16000, padding=padding, return_attention_mask=True, **kw)
        masks.append({"samples": n, "chunk_seconds": chunk, "padding": "longest" if padding is True else padding,
                      "frames": int(r["input_features"].shape[-1]), "mask_frames": int(r["attention_mask"].sum())})
    ls = list(range(0, 302)) + [999, 1000, 1001, 1099, 1100, 2999, 3000, 29_999, 30_000, 30_001]
    tokens = {"mel_frames": ls, "qwen2-audio": [qwen2_audio_tokens(l) for l in ls],
              "qwen2.5-omni": [qwen2_5_omni_tokens(l) for l in ls],
              "qwen3-omni": [int(v) for v in _get_feat_extract_output_lengths(np.array(ls), 50)]}
    meta = {"transformers": transformers.__version__, "numpy": np.__version__,
            "qwen2_padded_frames": int(q2f.shape[-1]), "qwen2_padded_tail_value": float(tail[0, 0]),
            "qwen2_valid_frames": valid, "qwen3_frames": int(q3f.shape[-1]), "masks": masks,
            "tokens": tokens}
    (out / "fixtures.json").write_text(json.dumps(meta, separators=(",", ":")) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k not in ("tokens",)}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
