"""The transformers side of the check: runs inside a virtual environment that has transformers, torch, torchvision,
Pillow and NumPy (tools/hf-check/make_venvs.sh), started by check.py with one of

    python hf_worker.py parity WORK OUT.json     processor parity and rope index on `stoker encode` outputs (checks 1, 2)
    python hf_worker.py serve  WORK OUT.json     tiny models on batches read from `stoker serve` (checks 2, 3)

WORK is check.py's work folder (its plan.json says what to compare). Every result is a JSON record; nothing is judged
here that check.py does not print.
"""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import traceback

import numpy as np
import torch
import transformers
from PIL import Image

IMG, VID, VS, VE, PAD = 151655, 151656, 151652, 151653, 151643
TV = tuple(int(x) for x in transformers.__version__.split(".")[:2])
V5 = TV >= (5, 0)
MM_TOKEN_TYPES = TV >= (5, 3)  # get_rope_index reads mm_token_type_ids from 5.3 (docs/model-inputs.md §3)


def log(*a):
    print(f"[{transformers.__version__}]", *a, file=sys.stderr, flush=True)


def first_line(e):
    s = f"{type(e).__name__}: {e}".strip()
    return s.splitlines()[0][:300] if s else type(e).__name__


# ----------------------------------------------------------------------------------------------- comparisons

def compare_exact(name, stoker, hf):
    """Equality of two arrays: shape, dtype, and where they differ the first differing index and both values."""
    stoker, hf = np.asarray(stoker), np.asarray(hf)
    r = {"tensor": name, "stoker_shape": list(stoker.shape), "hf_shape": list(hf.shape),
         "stoker_dtype": str(stoker.dtype), "hf_dtype": str(hf.dtype)}
    if stoker.shape != hf.shape:
        r["equal"] = False
        r["why"] = "shape"
        return r
    if stoker.dtype.kind == "f" and hf.dtype.kind == "f":
        eq = stoker.view(np.uint32) == hf.astype(stoker.dtype).view(np.uint32) if stoker.dtype == np.float32 \
            else stoker == hf
    else:
        eq = stoker == hf
    r["equal"] = bool(eq.all()) and stoker.dtype == hf.dtype
    if not eq.all():
        bad = np.argwhere(~eq)
        i = tuple(int(x) for x in bad[0])
        r.update(why="values", differing=int(bad.shape[0]), first_index=list(i),
                 stoker_value=stoker[i].item(), hf_value=hf[i].item())
        if stoker.dtype.kind == "f":
            r["max_abs_diff"] = float(np.abs(stoker.astype(np.float64) - hf.astype(np.float64)).max())
    elif stoker.dtype != hf.dtype:
        r["why"] = "dtype"
    return r


def mm_rule(input_ids):
    """docs/model-inputs.md §3: 1 where input_ids == image pad, 2 where == video pad, else 0."""
    ids = np.asarray(input_ids)
    return np.where(ids == IMG, 1, np.where(ids == VID, 2, 0)).astype(np.int64)


# ----------------------------------------------------------------------------------------------- tiny models

def _rope(interleaved=False):
    r = {"rope_type": "default", "mrope_section": [2, 1, 1]}
    if interleaved:
        r["mrope_interleaved"] = True
    if V5:
        r["rope_theta"] = 10000.0
        return {"rope_parameters": r}
    r["type"] = "mrope" if not interleaved else "default"
    return {"rope_scaling": r}


def _text(interleaved=False):
    d = dict(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=32768)
    d.update(_rope(interleaved))
    return d


def tiny_model(family, attn="sdpa", seed=0):
    """A random-init model of the family from a config (no weights): 2 text layers of hidden 32, a 1–2 block vision
    tower of hidden 32, the real token ids and the real patch, temporal and merge sizes."""
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration, Qwen3VLConfig, Qwen3VLForConditionalGeneration)
    ids = dict(image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE)
    if family == "qwen2-vl":
        cfg = Qwen2VLConfig(text_config=_text(), vision_config=dict(
            depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14, temporal_patch_size=2,
            spatial_merge_size=2), **ids)
        cls = Qwen2VLForConditionalGeneration
    elif family == "qwen2.5-vl":
        cfg = Qwen2_5_VLConfig(text_config=_text(), vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, window_size=112,
            fullatt_block_indexes=[0], patch_size=14, temporal_patch_size=2, spatial_merge_size=2,
            tokens_per_second=2), **ids)
        cls = Qwen2_5_VLForConditionalGeneration
    else:
        cfg = Qwen3VLConfig(text_config=_text(True), vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=16,
            temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304, deepstack_visual_indexes=[0]),
            **ids)
        cls = Qwen3VLForConditionalGeneration
    cfg._attn_implementation = attn
    for sub in ("text_config", "vision_config"):
        try:
            getattr(cfg, sub)._attn_implementation = attn
        except Exception:
            pass
    torch.manual_seed(seed)
    return cls(cfg).eval()


def rope_index(model, input_ids, attention_mask, image_grid_thw):
    """The model's own rule: get_rope_index as the model calls it when position_ids is None (keywords, since the
    argument order changed in 5.x)."""
    kw = dict(input_ids=input_ids, image_grid_thw=image_grid_thw, attention_mask=attention_mask)
    if MM_TOKEN_TYPES:
        kw["mm_token_type_ids"] = torch.from_numpy(mm_rule(input_ids.numpy()))
    pos, _ = model.model.get_rope_index(**kw)
    return pos


def compare_positions(stoker_pos, hf_pos, attention_mask):
    """Stoker's (3,B,L) against the model's: equal where attention_mask == 1 (R1), and the pad values on both sides."""
    s, h = np.asarray(stoker_pos), np.asarray(hf_pos)
    am = np.asarray(attention_mask).astype(bool)
    r = {"shape_stoker": list(s.shape), "shape_hf": list(h.shape)}
    if s.shape != h.shape:
        r["equal_attended"] = False
        return r
    sa, ha = s[:, am], h[:, am]
    r["equal_attended"] = bool(np.array_equal(sa, ha))
    if not r["equal_attended"]:
        bad = np.argwhere(sa != ha)[0]
        where = np.argwhere(am)[bad[1]]
        r.update(first_index=[int(bad[0])] + [int(x) for x in where], stoker_value=int(sa[tuple(bad)]),
                 hf_value=int(ha[tuple(bad)]))
    r["equal_whole"] = bool(np.array_equal(s, h))
    r["pad_values_stoker"] = sorted(set(int(x) for x in s[:, ~am].ravel()))
    r["pad_values_hf"] = sorted(set(int(x) for x in h[:, ~am].ravel()))
    return r


# ----------------------------------------------------------------------------------------------- check 1 (+R1 per sample)

def load_images(case):
    from transformers.image_utils import load_image
    return [load_image(p) if case["exif"] == "apply" else Image.open(p) for p in case["images"]]


def collapse_pads(text):
    """Each run of <|image_pad|> folded to one, as the chat template writes it before the processor expands it."""
    return re.sub(r"(?:<\|image_pad\|>)+", "<|image_pad|>", text)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def processor_outputs(proc, text, images):
    out = proc(text=[text], images=images or None, return_tensors="pt")
    return {k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for k, v in out.items()}


def parity(work, out_path):
    from transformers import AutoProcessor
    plan = json.load(open(os.path.join(work, "plan.json")))
    import PIL
    results = {"transformers": transformers.__version__, "torch": torch.__version__, "pillow": PIL.__version__,
               "cases": []}
    for family in plan["families"]:
        model_dir = os.path.join(work, "models", family)
        t0 = time.time()
        slow = AutoProcessor.from_pretrained(model_dir, use_fast=False)
        fast = AutoProcessor.from_pretrained(model_dir)  # the default: transformers' fast (torchvision) processor
        results.setdefault("processors", {})[family] = {
            "slow": [type(slow).__name__, type(slow.image_processor).__name__, type(slow.tokenizer).__name__],
            "default": [type(fast).__name__, type(fast.image_processor).__name__, type(fast.tokenizer).__name__]}
        # The pixel bounds the folder gives (min_pixels/max_pixels, else size), against those the slow processor took:
        # where they differ, a second slow processor with the folder's bounds set by hand is compared too (a control
        # that tells a difference of bounds from any other).
        cfg = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
        want = {"shortest_edge": cfg.get("min_pixels", cfg.get("size", {}).get("shortest_edge")),
                "longest_edge": cfg.get("max_pixels", cfg.get("size", {}).get("longest_edge"))}
        got = dict(slow.image_processor.size)
        control = None
        if {k: got.get(k) for k in want} != want:
            results["processors"][family]["slow_bounds"] = {"folder": want, "slow_processor": got}
            control = AutoProcessor.from_pretrained(model_dir, use_fast=False)
            control.image_processor.size = dict(want)
            control.image_processor.min_pixels = want["shortest_edge"]
            control.image_processor.max_pixels = want["longest_edge"]
            log(family, "the slow processor's bounds", got, "differ from the folder's", want)
        model = tiny_model(family)
        log(family, "processors and model loaded in", round(time.time() - t0, 1), "s")
        for case in plan["cases"]:
            t1 = time.time()
            try:
                hf = hf_outputs(slow, fast, case)
                if control is not None and case["images"] and "text" in hf:
                    hf["control"] = processor_outputs(control, hf["text"], load_images(case))
            except Exception as e:  # a crash of the check is a result too, never a silent pass
                hf = {"crash": first_line(e), "traceback": traceback.format_exc()[-2000:]}
            for variant in plan["variants"]:
                enc = os.path.join(work, "enc", family, variant, case["id"])
                r = {"family": family, "case": case["id"], "group": case["group"], "variant": variant,
                     "exif": case["exif"], "images": len(case["images"])}
                try:
                    if "crash" in hf:
                        r.update(error=hf["crash"], traceback=hf["traceback"])
                    else:
                        r.update(parity_case(slow, model, case, enc, hf))
                except Exception as e:
                    r["error"] = first_line(e)
                    r["traceback"] = traceback.format_exc()[-2000:]
                results["cases"].append(r)
                log(family, variant, case["id"], "ok" if r.get("pass") else "FAIL")
            log(family, case["id"], round(time.time() - t1, 1), "s")
    json.dump(results, open(out_path, "w"), indent=1)


def hf_outputs(slow, fast, case):
    """What transformers makes of the case: the slow processor's text and tensors (or its error), and the default
    (fast) processor's."""
    images = load_images(case)
    out = {"images": len(images)}
    try:
        out["text"] = slow.apply_chat_template(case["messages"], tokenize=False)
        out["slow"] = processor_outputs(slow, out["text"], images)
    except Exception as e:
        out["error"] = first_line(e)
        return out
    out["fast_text"] = fast.apply_chat_template(case["messages"], tokenize=False)
    out["fast"] = processor_outputs(fast, out["fast_text"], images)
    return out


def parity_case(slow, model, case, enc, h):
    r = {}
    failed = os.path.join(enc, "FAILED")
    if os.path.exists(failed):
        stoker_error = open(failed).read().strip()
        r.update(stoker_error=stoker_error, hf_error=h.get("error"), **{"pass": "error" in h})
        if "slow" in h:  # what transformers made of what Stoker refused
            r["hf_image_grid_thw"] = h["slow"].get("image_grid_thw", np.zeros((0, 3))).tolist()
            r["hf_pixel_values_shape"] = list(h["slow"].get("pixel_values", np.zeros((0, 0))).shape)
        return r
    if "error" in h:
        r.update(hf_error=h["error"], **{"pass": False})
        return r
    text, hf, images = h["text"], h["slow"], h["images"]
    s = {k: np.load(os.path.join(enc, k + ".npy")) for k in
         ("input_ids", "attention_mask", "position_ids", "pixel_values", "image_grid_thw")}
    checks = []
    # the chat template's text: Stoker's ids decoded, each run of image pads folded to one, against transformers' text
    decoded = collapse_pads(slow.tokenizer.decode(s["input_ids"].tolist(), skip_special_tokens=False))
    i = first_diff(decoded, text)
    r["text_equal"] = i == -1
    if i != -1:
        r["text_first_diff"] = {"char": i, "stoker": decoded[max(0, i - 20):i + 20], "hf": text[max(0, i - 20):i + 20]}
    checks.append(r["text_equal"])
    cmp = [compare_exact("input_ids", s["input_ids"], hf["input_ids"][0]),
           compare_exact("attention_mask", s["attention_mask"], hf["attention_mask"][0])]
    if images:
        cmp.append(compare_exact("pixel_values", s["pixel_values"], hf["pixel_values"]))
        cmp.append(compare_exact("image_grid_thw", s["image_grid_thw"], hf["image_grid_thw"]))
    else:
        r["hf_keys_text_only"] = sorted(hf)
        r["stoker_pixel_values_shape"] = list(s["pixel_values"].shape)
        r["stoker_image_grid_thw_shape"] = list(s["image_grid_thw"].shape)
    if "mm_token_type_ids" in hf:  # 5.x processors return it by default
        cmp.append(compare_exact("mm_token_type_ids(rule on Stoker ids)", mm_rule(s["input_ids"]), hf["mm_token_type_ids"][0]))
        own = os.path.join(enc, "mm_token_type_ids.npy")
        if os.path.exists(own):
            cmp.append(compare_exact("mm_token_type_ids(Stoker)", np.load(own).reshape(-1), hf["mm_token_type_ids"][0]))
    r["tensors"] = cmp
    checks += [c["equal"] for c in cmp]
    if "control" in h:
        c = h["control"]
        ctl = [compare_exact(n, s[n], c[n][0] if n in ("input_ids", "attention_mask") else c[n])
               for n in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")]
        r["control"] = {"pass": all(t["equal"] for t in ctl), "tensors": ctl}
    # the default (fast) processor: how far its pixels are from Stoker's, and whether ids and grids agree
    fo = h["fast"]
    f = {"text_equal": h["fast_text"] == text, "input_ids_equal": bool(np.array_equal(fo["input_ids"][0], s["input_ids"]))}
    if images:
        f["image_grid_thw_equal"] = bool(np.array_equal(fo["image_grid_thw"], s["image_grid_thw"]))
        if fo["pixel_values"].shape == s["pixel_values"].shape:
            d = np.abs(fo["pixel_values"].astype(np.float64) - s["pixel_values"].astype(np.float64))
            f.update(pixel_values_max_abs_diff=float(d.max()), pixel_values_mean_abs_diff=float(d.mean()),
                     pixel_values_bit_equal=bool(d.max() == 0))
        else:
            f["pixel_values_shape"] = [list(fo["pixel_values"].shape), list(s["pixel_values"].shape)]
    r["fast"] = f
    # R1 on this unpadded sample: the model's own rope index against Stoker's position_ids
    ids = torch.from_numpy(s["input_ids"])[None]
    am = torch.from_numpy(s["attention_mask"])[None]
    thw = torch.from_numpy(s["image_grid_thw"]) if images else None
    pos = rope_index(model, ids, am, thw)
    r["positions"] = compare_positions(s["position_ids"][:, None, :], pos.numpy(), am.numpy())
    checks.append(r["positions"]["equal_attended"])
    r["pass"] = all(checks)
    return r


# ----------------------------------------------------------------------------------------------- checks 2 and 3 (serve)

def start_serve(plan, family, mode, sock_dir, log_path):
    sock = os.path.join(sock_dir, f"{family}-{mode}.sock")
    cmd = [plan["stoker"], "serve", "--model", os.path.join(plan["work"], "models", family), "--override-model",
           "--data", plan["serve"]["data"], "--ranks", "1", "--batch", str(plan["serve"]["batch"]),
           "--steps", str(plan["serve"]["steps"]), "--max-pixels", str(plan["serve"]["max_pixels"]),
           "--text-only", mode, "--socket", sock, "--job", "hfcheck", "--threads", "2",
           "--shm-budget", "2G", "--max-seq-len", "2048", "--warm-up-ms", "0", "--exif", "ignore",
           # the release this environment runs: from 5.3 Stoker adds mm_token_type_ids and pads positions with 0
           "--transformers", transformers.__version__] + plan["serve"].get("extra", [])
    out = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()  # the child has its own descriptor
    deadline = time.time() + 180
    while not os.path.exists(sock):
        if p.poll() is not None:
            raise RuntimeError(f"stoker serve exited with {p.returncode}: see {log_path}")
        if time.time() > deadline:
            stop_serve(p)
            raise RuntimeError(f"stoker serve did not open {sock} in 180 s: see {log_path}")
        time.sleep(0.2)
    return p, sock, cmd


def stop_serve(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def read_batches(plan, family, mode, sock_dir):
    """Starts `stoker serve`, reads every batch with the Python client, keeps owned copies of them."""
    log_path = os.path.join(plan["work"], "serve", f"{family}-{mode}-{transformers.__version__}.log")
    t0 = time.time()
    p, sock, cmd = start_serve(plan, family, mode, sock_dir, log_path)
    t1 = time.time()
    batches = []
    try:
        refused = 0
        loader, refused = open_loader(sock)
        if refused:
            log(family, mode, f"connection refused {refused} time(s) after the socket appeared; connected on retry")
        with loader:
            for batch in loader:
                meta = loader.last_meta
                batches.append({"inputs": {k: v.clone() for k, v in batch.items()}, "keys": list(batch),
                                "sample_index": [int(x) for x in meta.sample_index], "step": int(meta.step),
                                "metadata": sorted(meta.metadata) if meta.metadata else []})
                del batch
    finally:
        t2 = time.time()
        stop_serve(p)
        log(family, mode, f"serve up in {t1 - t0:.1f} s, read in {t2 - t1:.1f} s, stopped in {time.time() - t2:.1f} s")
    return batches, " ".join(cmd), refused


def open_loader(sock, tries=40):
    """A connected Loader. The socket file appears when the service binds it, a moment before it accepts, so a
    refused connection right then is retried (0.25 s apart)."""
    from stoker import Loader, StokerError
    for attempt in range(tries):
        loader = Loader(sock, 0, 1, job="hfcheck", as_torch=True, timeout=300)
        try:
            loader.connect()
            return loader, attempt
        except StokerError as e:
            loader.close()
            if "Connection refused" not in str(e) or attempt == tries - 1:
                raise
            time.sleep(0.25)


def image_tokens_attended(b):
    return int(((b["input_ids"] == IMG) & (b["attention_mask"] == 1)).sum())


def forward(model, inputs):
    with torch.no_grad():
        return model(**inputs)


def serve_check(work, out_path):
    plan = json.load(open(os.path.join(work, "plan.json")))
    sys.path.insert(0, os.path.join(plan["root"], "clients", "python"))
    sock_dir = os.path.join(work, "sock")
    os.makedirs(sock_dir, exist_ok=True)
    import PIL
    res = {"transformers": transformers.__version__, "torch": torch.__version__, "pillow": PIL.__version__, "families": {}}
    for family in plan["families"]:
        fam = res["families"][family] = {"modes": {}}
        model = tiny_model(family)
        eager = tiny_model(family, attn="eager")
        kept = {}
        for mode in ("dummy-image", "allow"):
            t0 = time.time()
            try:
                batches, cmd, refused = read_batches(plan, family, mode, sock_dir)
            except Exception as e:
                fam["modes"][mode] = {"error": first_line(e), "traceback": traceback.format_exc()[-2000:]}
                log(family, mode, "serve/read failed:", first_line(e))
                continue
            kept[mode] = batches
            rows = []
            for b in batches:
                rows.append(batch_checks(model, eager, b, mode))
            fam["modes"][mode] = {"command": cmd, "batches": rows, "seconds": round(time.time() - t0, 1),
                                  "connections_refused": refused}
            log(family, mode, len(rows), "batches in", round(time.time() - t0, 1), "s")
        fam["dummy_vs_allow"] = dummy_vs_allow(model, kept)
        fam["extra"] = extra_rows(family, model, kept)
    json.dump(res, open(out_path, "w"), indent=1)


def batch_checks(model, eager, b, mode):
    x = b["inputs"]
    r = {"step": b["step"], "sample_index": b["sample_index"], "keys": b["keys"], "metadata": b["metadata"],
         "shapes": {k: list(v.shape) for k, v in x.items()},
         "image_tokens_attended": image_tokens_attended(x),
         "image_pad_tokens": int((x["input_ids"] == IMG).sum())}
    r["kind"] = ("images" if r["image_tokens_attended"] else
                 "dummy-image" if r["image_pad_tokens"] else "text-only")
    r["sample_index_in_inputs"] = "sample_index" in x
    if "mm_token_type_ids" in x:  # R3 on a served batch: Stoker's tensor against the §3 rule on its own input_ids
        r["mm_token_type_ids_is_rule"] = bool(np.array_equal(x["mm_token_type_ids"].numpy(), mm_rule(x["input_ids"].numpy())))
    # R10 / R5: the dict as the client yields it, straight into forward
    try:
        out = forward(model, x)
        r["loss"] = float(out.loss)
        r["finite"] = math.isfinite(r["loss"])
        ref_logits = out.logits
    except Exception as e:
        r["forward_error"] = first_line(e)
        ref_logits = None
    if ref_logits is None and x.get("pixel_values") is not None and x["pixel_values"].shape[0] == 0:
        y = {k: v for k, v in x.items() if k not in ("pixel_values", "image_grid_thw")}
        try:
            out = forward(model, y)
            r["loss_without_empty_pixel_keys"] = float(out.loss)
            r["finite_without_empty_pixel_keys"] = math.isfinite(r["loss_without_empty_pixel_keys"])
            ref_logits = out.logits
            x = y
        except Exception as e:
            r["forward_error_without_empty_pixel_keys"] = first_line(e)
    # R1: the model's own rope index on the padded batch
    am = x["attention_mask"]
    thw = x.get("image_grid_thw")
    try:
        pos = rope_index(model, x["input_ids"], am, thw if thw is not None and thw.shape[0] else None)
        r["positions"] = compare_positions(x["position_ids"].numpy(), pos.numpy(), am.numpy())
    except Exception as e:
        r["positions"] = {"error": first_line(e)}
    # R8 (and R12 on ≥5.3): logits with Stoker's explicit position_ids against the model's own, on attended tokens
    if ref_logits is not None:
        for attn, m in (("sdpa", model), ("eager", eager)):
            try:
                with_pos = ref_logits if m is model else forward(m, x).logits
                y = {k: v for k, v in x.items() if k != "position_ids"}
                if MM_TOKEN_TYPES and "mm_token_type_ids" not in y:  # Stoker's own where it sent one (R12), else the rule's
                    y["mm_token_type_ids"] = torch.from_numpy(mm_rule(x["input_ids"].numpy()))
                without = forward(m, y).logits
                mask = am.bool()
                d = (with_pos[mask] - without[mask]).abs().max().item()
                r.setdefault("logits_explicit_vs_model_positions", {})[attn] = {
                    "max_abs_diff": d, "bit_equal": bool(torch.equal(with_pos[mask], without[mask]))}
            except Exception as e:
                r.setdefault("logits_explicit_vs_model_positions", {})[attn] = {"error": first_line(e)}
    return r


def dummy_vs_allow(model, kept):
    """Each dummy-image batch against the batch of the same samples under allow (its empty pixel keys removed)."""
    out = []
    if "dummy-image" not in kept or "allow" not in kept:
        return out
    allow = {tuple(b["sample_index"]): b for b in kept["allow"]}
    for b in kept["dummy-image"]:
        x = b["inputs"]
        if image_tokens_attended(x) or not int((x["input_ids"] == IMG).sum()):
            continue
        r = {"sample_index": b["sample_index"], "dummy_shapes": {k: list(v.shape) for k, v in x.items()}}
        a = allow.get(tuple(b["sample_index"]))
        if a is None:
            r["error"] = "no batch of these samples under allow"
            out.append(r)
            continue
        y = {k: v for k, v in a["inputs"].items() if not (k in ("pixel_values", "image_grid_thw") and v.shape[0] == 0)}
        r["allow_keys"] = sorted(y)
        r["allow_shapes"] = {k: list(v.shape) for k, v in y.items()}
        ox, oy = forward(model, x), forward(model, y)
        r["loss_dummy"], r["loss_allow"] = float(ox.loss), float(oy.loss)
        r["abs_diff"] = abs(r["loss_dummy"] - r["loss_allow"])
        r["rel_diff"] = r["abs_diff"] / abs(r["loss_allow"])
        mask = y["attention_mask"].bool()
        L = y["input_ids"].shape[1]
        same_tokens = torch.equal(x["input_ids"][:, :L][mask], y["input_ids"][mask])
        r["same_attended_tokens"] = bool(same_tokens)
        r["logits_max_abs_diff_attended"] = (ox.logits[:, :L][mask] - oy.logits[mask]).abs().max().item()
        out.append(r)
    return out


def extra_rows(family, model, kept):
    """R9 (≥5.3: no position_ids and no mm_token_type_ids) and R11 (4.57 Qwen3-VL, B=1, 3 rows, mask None)."""
    r = {}
    batches = [b for b in kept.get("dummy-image", []) if image_tokens_attended(b["inputs"])]
    if not batches:
        return r
    x = batches[0]["inputs"]
    ref = forward(model, x)
    mask = x["attention_mask"].bool()
    if MM_TOKEN_TYPES:
        y = {k: v for k, v in x.items() if k != "position_ids"}
        try:
            o = forward(model, y)
            r["R9"] = {"outcome": "ran", "loss": float(o.loss), "loss_explicit": float(ref.loss),
                       "logits_max_abs_diff": (o.logits[mask] - ref.logits[mask]).abs().max().item()}
        except Exception as e:
            r["R9"] = {"outcome": "raised", "error": first_line(e)}
    # R11: the first sample alone, unpadded, attention_mask None, use_cache False
    n = int(x["attention_mask"][0].sum())
    if int(x["attention_mask"][0, :n].sum()) == n:
        single = {"input_ids": x["input_ids"][:1, :n], "labels": x["labels"][:1, :n],
                  "attention_mask": x["attention_mask"][:1, :n], "position_ids": x["position_ids"][:, :1, :n]}
        k = int((single["input_ids"] == IMG).sum())
        if k:
            thw = x["image_grid_thw"]
            rows, tok, used = [], 0, 0
            for g in thw:
                if tok >= k:
                    break
                rows.append(g)
                tok += int(g.prod()) // 4
                used += int(g.prod())
            single["image_grid_thw"] = torch.stack(rows)
            single["pixel_values"] = x["pixel_values"][:used]
        try:
            a = float(forward(model, single).loss)
            nomask = dict(single, attention_mask=None, use_cache=False)
            c = float(forward(model, nomask).loss)
            t = torch.arange(n)[None, None]
            four = dict(nomask, position_ids=torch.cat([t, single["position_ids"]], 0))
            f = float(forward(model, four).loss)
            r["R11"] = {"loss_with_mask": a, "loss_mask_none_use_cache_false": c, "loss_4rows_mask_none": f,
                        "mask_none_differs": abs(a - c) > 1e-6, "four_rows_matches": abs(a - f) <= 1e-6}
        except Exception as e:
            r["R11"] = {"error": first_line(e)}
    return r


if __name__ == "__main__":
    what, work, out = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.set_num_threads(int(os.environ.get("HF_CHECK_THREADS", "2")))
    {"parity": parity, "serve": serve_check}[what](work, out)
