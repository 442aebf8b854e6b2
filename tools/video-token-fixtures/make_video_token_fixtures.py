#!/usr/bin/python3
"""Writes stoker-text/src/test/resources/dev/stoker/text/video/token_fixtures.json: the token side (rendered text,
input_ids, labels, attention_mask, position_ids) of video samples under the three compat levels of the reference
(../shared/reference/ref_qwenvl_video.py: "5.18" = transformers 5.18.0, "4.57" = transformers 4.57.6, "official" =
qwen-vl-finetune rope2d), so that VideoTokenFixturesTest holds Stoker to all three without ../shared.

Inputs per case: the 15 non-error cases of ../shared/vectors/qwen-vl-video (their samples, grids and timestamps from
case.json; second_per_grid_t per compat from the reference's own process_video, run on stand-in frames of the clip's
frame count and rate: spg and timestamps depend on those only) and a few synthetic samples that reach what the
vectors do not (Qwen3 text directly before a video under 4.57, Qwen2.5 spg < 1 under 4.57, long Qwen2 videos).
Checks before writing: for compat 5.18 every array equals the case's .npy, the spg and timestamps equal case.json.

Run with Debian's /usr/bin/python3 (numpy; Pillow not needed) from the repository root:
    /usr/bin/python3 tools/video-token-fixtures/make_video_token_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os
import sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
ap.add_argument("--out", default="stoker-text/src/test/resources/dev/stoker/text/video/token_fixtures.json")
args = ap.parse_args()
SHARED = os.path.abspath(args.shared)
sys.path.insert(0, os.path.join(SHARED, "reference"))
import ref_qwenvl as R  # noqa: E402
import ref_qwenvl_video as V  # noqa: E402

VEC = os.path.join(SHARED, "vectors", "qwen-vl-video")
COMPATS = ["5.18", "4.57", "official"]
TOK = R.QwenTokenizer(os.path.join(SHARED, "tokenizers", "qwen2", "tokenizer.json"))


def token_side(messages, family, img_grids, videos, compat):
    """videos: dicts with video_grid_thw, timestamps (Qwen3) and second_per_grid_t (Qwen2.5), in item order."""
    text = V.render(messages, family)
    expanded = V.expand_placeholders(text, img_grids, videos, family, 2, compat)
    ids = TOK.encode(expanded)
    labels = R.labels_official(ids)
    spg = [v["second_per_grid_t"] for v in videos] if family == "qwen2.5-vl" else None
    pos = V.rope_index(ids, img_grids, [v["video_grid_thw"] for v in videos], family, spg,
                       "5.18" if compat == "5.18" else compat, 2)
    return text, np.array(ids, np.int64), np.array(labels, np.int64), pos


def f32(x):
    return None if x is None else float(np.float32(x))


def video_json(family, v):
    return {"grid": [int(x) for x in v["video_grid_thw"]],
            "second_per_grid_t": f32(v.get("second_per_grid_t")) if family == "qwen2.5-vl" else None,
            "timestamp_texts": ["<" + V.format_seconds(t) + " seconds>" for t in v["timestamps"]]
            if family == "qwen3-vl" else []}


def result(text, ids, labels, pos):
    return {"text": text, "input_ids": ids.tolist(), "labels": labels.tolist(),
            "attention_mask": [1] * len(ids), "position_ids": pos.tolist()}


cases = []
for name in sorted(os.listdir(VEC)):
    d = os.path.join(VEC, name)
    if not name.startswith("d") or not os.path.isdir(d):
        continue
    case = json.load(open(os.path.join(d, "case.json")))
    if case.get("expected_error"):
        continue
    fam, messages = case["family"], case["sample"]["messages"]
    img_grids = [list(map(int, g)) for g in np.load(os.path.join(d, "image_grid_thw.npy"))] \
        if os.path.exists(os.path.join(d, "image_grid_thw.npy")) else []
    items = [it for kind, it in V.media_items(messages) if kind == "video"]
    entry = {"id": case["id"], "family": fam, "source": "vectors/qwen-vl-video/" + name, "sample": case["sample"],
             "sample_llamafactory": case.get("sample_llamafactory"), "image_grids": img_grids, "compat": {}}
    for compat in COMPATS:
        videos = []
        for item, meta in zip(items, case["videos"]):
            stand_in = np.zeros((meta["decoded_frames"], 64, 64, 3), np.uint8)   # spg/timestamps need count and rate only
            pv = V.process_video(stand_in, meta["average_fps"], fam, case["sampler"], case["options"], item,
                                 compat if compat != "official" else "4.57")
            pv["video_grid_thw"] = np.array(meta["video_grid_thw"], np.int64)
            assert pv["indices"] == meta["frame_indices"], (name, pv["indices"])
            if fam == "qwen3-vl":
                assert pv["timestamps"] == meta["timestamps"], name
            if compat == "5.18" and fam == "qwen2.5-vl":
                assert float(np.float32(pv["second_per_grid_t"])) == float(np.load(os.path.join(d, "second_per_grid_ts.npy"))[len(videos)]), name
            videos.append(pv)
        text, ids, labels, pos = token_side(messages, fam, img_grids, videos, compat)
        if compat == "5.18":
            assert text == case["text"], name
            for key, arr in (("input_ids", ids), ("labels", labels), ("position_ids", pos)):
                assert np.array_equal(arr, np.load(os.path.join(d, key + ".npy"))), (name, key)
            assert np.array_equal(np.ones(len(ids), np.int64), np.load(os.path.join(d, "attention_mask.npy"))), name
        entry["compat"][compat] = dict(videos=[video_json(fam, v) for v in videos], **result(text, ids, labels, pos))
    cases.append(entry)


def synthetic(cid, family, messages, img_grids, videos, why, llamafactory=None):
    if llamafactory is not None:   # the HF form of a LLaMA-Factory sample is the reference's own conversion
        messages = V.llamafactory_to_messages(llamafactory)
    entry = {"id": cid, "family": family, "source": "synthetic: " + why, "sample": {"messages": messages},
             "sample_llamafactory": llamafactory, "image_grids": img_grids, "compat": {}}
    for compat in COMPATS:
        vids = [dict(video_grid_thw=np.array(v["grid"], np.int64), timestamps=v.get("timestamps", []),
                     second_per_grid_t=v.get("spg")) for v in videos]
        text, ids, labels, pos = token_side(messages, family, img_grids, vids, compat)
        entry["compat"][compat] = dict(videos=[video_json(family, v) for v in vids], **result(text, ids, labels, pos))
    cases.append(entry)


synthetic("s01_qwen3_text_before_video", "qwen3-vl",
          [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "video", "video": "a.mp4", "fps": 1.5},
                                        {"type": "text", "text": " What happens?"}]},
           {"role": "assistant", "content": "It pans."}],
          [], [{"grid": [3, 4, 6], "timestamps": [0.5, 1.5, 2.75]}],
          "under 4.57/official the first timestamp follows text ('Look: <0.5 seconds>') and is tokenized with it")
synthetic("s02_qwen25_spg_below_one_then_image", "qwen2.5-vl",
          None, [[1, 4, 4]], [{"grid": [6, 4, 4], "spg": 0.6}],
          "spg 0.6: 4.57 truncates it to 0 (all temporal positions equal), 5.18 overlaps the text after the video",
          {"messages": [{"role": "user", "content": "<video>Then this:<image>Same place?"},
                        {"role": "assistant", "content": "Yes."}], "images": ["b.png"], "videos": ["a.mp4"]})
synthetic("s03_qwen2_long_videos_multiturn", "qwen2-vl",
          None, [[1, 2, 4]], [{"grid": [9, 2, 2]}, {"grid": [4, 6, 2]}],
          "9 temporal patches of 2x2: 5.18's advance ignores them (gap 8), 4.57's does not",
          {"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "<video>What is it?"}, {"role": "assistant", "content": "A road."},
                        {"role": "user", "content": "And <video> vs <image>?"}, {"role": "assistant", "content": "Same road."}],
           "images": ["c.png"], "videos": ["a.mp4", "b.mp4"]})
doc = {"what": "token side of video samples per compat level; made by tools/video-token-fixtures/make_video_token_fixtures.py",
       "reference": "shared/reference/ref_qwenvl_video.py (numpy " + np.__version__ + "), tokenizer shared/tokenizers/qwen2",
       "compat": {"5.18": "transformers 5.18.0", "4.57": "transformers 4.57.6", "official": "qwen-vl-finetune rope2d"},
       "cases": cases}
os.makedirs(os.path.dirname(args.out), exist_ok=True)
with open(args.out, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {args.out}: {len(cases)} cases x {len(COMPATS)} compat levels, {os.path.getsize(args.out)} bytes")
