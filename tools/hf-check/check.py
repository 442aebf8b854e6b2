#!/usr/bin/env python3
"""Stoker's tensors against the real transformers libraries (CPU, no weights). See README.md here.

    tools/hf-check/check.py [--work DIR] [--variants builtin,model] [--skip-serve] [--skip-parity] VENV_PYTHON...

Runs with any Python 3.9+ (stdlib only); each VENV_PYTHON is the interpreter of an environment with transformers,
torch, torchvision, Pillow and NumPy (make_venvs.sh). It

 1. writes a model folder per family (model_folders.py: published configs, the bundled tokenizer, the published chat
    template) and the samples (the conformance chats of testdata/qwen-vl and testdata/qwen-vl-hub, and samples of
    assets/photos), runs `./stoker encode --model DIR --sample S --out O` on each, and has every environment compare
    the outputs with AutoProcessor (hf_worker.py parity);
 2. starts `./stoker serve` on a small data set under --text-only dummy-image and allow for each family and
    environment, and has the environment read the batches with the Python client and run a tiny random-init model
    on them (hf_worker.py serve);
 3. prints the tables (also WORK/report.md) and writes WORK/results.json. Exit status 0 when every check passed.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import model_folders  # noqa: E402

PHOTOS = os.path.join(ROOT, "assets", "photos")
QWEN_VL = os.path.join(ROOT, "testdata", "qwen-vl")
QWEN_VL_HUB = os.path.join(ROOT, "testdata", "qwen-vl-hub")
ORIENT = os.path.join(ROOT, "testdata", "images")


def photo(name):
    return os.path.join(PHOTOS, name + ".jpg")


def img(name):
    return {"type": "image", "image": name}


def txt(text):
    return {"type": "text", "text": text}


def user(*content):
    return {"role": "user", "content": list(content)}


def assistant(text):
    return {"role": "assistant", "content": text}


def system(text):
    return {"role": "system", "content": text}


# Samples of the bundled photos: one or two images, text-only, multi-turn, system prompts, odd text.
# (id, messages with image names, {name: source file}, exif policy)
def photo_cases():
    A, C, K, R = "skimage__astronaut", "skimage__chelsea", "skimage__coffee", "skimage__rocket"
    G, H, T = "skimage__camera", "skimage__hubble_deep_field", "skimage__retina"
    P, W, F = "lomiri16__Picture_0B_by_freespace", "lomiri16__Wine_by_Jakkub_Mede", "lomiri16__friends_by_Aitzol_Berasategi"
    S, Z, E = "lomiri16__sunset_by_Aitzol_Berasategi", "lomiri16__aitzgorri_by_Aitzol_Berasategi", "lomiri16__seeding_by_Clements_Engelhardt"
    cases = [
        ("ph01_one_image", [user(img(A), txt("Who is this?")), assistant("An astronaut in a white suit.")], [A]),
        ("ph02_two_images_one_turn", [user(img(C), img(K), txt("What do these two have in common?")),
                                       assistant("Nothing much: a cat and a cup of coffee.")], [C, K]),
        ("ph03_text_then_image", [user(txt("Look at this rocket: "), img(R), txt(" How tall is it?")),
                                   assistant("It is hard to say from the photo.")], [R]),
        ("ph04_system_and_image", [system("You answer in one word."), user(img(G), txt("Colour or grey?")),
                                    assistant("Grey.")], [G]),
        ("ph05_multiturn_two_images", [user(img(H), txt("What is this?")), assistant("A deep field of galaxies."),
                                       user(txt("And this?"), img(T)), assistant("A retina scan.")], [H, T]),
        ("ph06_image_then_text_turns", [user(img(P), txt("Describe the light.")), assistant("Soft and warm."),
                                        user(txt("Any people?")), assistant("None that I can see.")], [P]),
        ("ph07_text_only", [user(txt("What is 2 + 2?")), assistant("4.")], []),
        ("ph08_text_only_multiturn_system", [system("You are terse."), user(txt("Name a colour.")), assistant("Red."),
                                             user(txt("Another one.")), assistant("Blue.")], []),
        ("ph09_portrait_photo", [user(img(W), txt("What is in the glass?")), assistant("Red wine.")], [W]),
        ("ph10_two_large_photos_two_turns", [user(img(F), txt("How many people?")), assistant("Several friends."),
                                             user(img(S), txt("And the time of day here?")), assistant("Sunset.")], [F, S]),
        ("ph11_image_only_turn", [user(img(Z)), assistant("A mountain ridge under clouds.")], [Z]),
        ("ph12_unicode_text", [user(img(K), txt("Qu'est-ce que c'est ? 这是什么？ 🙂")),
                               assistant("Un café. 一杯咖啡。 ☕")], [K]),
        ("ph13_whitespace_and_newlines", [user(txt("  Two spaces before,\n\nblank line,\ttab.  "), img(A)),
                                          assistant("Line one.\nLine two.\n")], [A]),
        ("ph14_string_user_content", [user(img(C), txt("What animal?")), assistant("A cat."),
                                      {"role": "user", "content": "Is it sleeping?"}, assistant("No.")], [C]),
        ("ph15_long_answer", [user(img(E), txt("Describe everything you see, in detail.")),
                              assistant(" ".join(["Rows of young plants grow in dark soil."] * 20))], [E]),
        ("ph16_literal_image_tag_text", [user(txt("What does <image> mean in a prompt?")),
                                         assistant("It marks where an image goes.")], []),
        ("ph17_three_turns_images_first_last", [user(img(R), txt("One.")), assistant("A rocket."), user(txt("Two.")),
                                                assistant("Still a rocket."), user(img(G), txt("Three.")),
                                                assistant("A photographer.")], [R, G]),
        ("ph18_same_image_twice", [user(img(A), txt("First look.")), assistant("An astronaut."),
                                   user(img(A), txt("Second look.")), assistant("The same astronaut.")], [A, A]),
        ("ph19_system_text_only_long", [system("Rules: " + "be brief; " * 30), user(txt("Hello")),
                                        assistant("Hello.")], []),
        ("ph20_two_images_and_system", [system("You compare photos."), user(img(S), txt("versus"), img(Z)),
                                        assistant("Both are landscapes.")], [S, Z]),
    ]
    return [(cid, msgs, {n: photo(n) for n in names}, "ignore") for cid, msgs, names in cases]


def exif_cases():
    """EXIF orientation applied (Stoker's default) against transformers' load_image, which applies it too."""
    out = []
    for name in ("orient_6_203x157", "orient_5_le", "orient_8_be"):
        out.append(("ex_" + name, [user(img(name), txt("Which way is up?")), assistant("The top.")],
                    {name: os.path.join(ORIENT, name + ".jpg")}, "apply"))
    return out


def refusal_cases():
    """An image under the resize factor: older processors raised (smart_resize); 4.57.6 and 5.18.0 resize it up, and so
    does Stoker since the first run of this check found the difference. Whatever each side does is compared."""
    return [("rf_p02_tiny_20x30", [user(img("p02_tiny_20x30"), txt("What is this?")), assistant("Too small to tell.")],
             {"p02_tiny_20x30": os.path.join(QWEN_VL, "images", "p02_tiny_20x30.png")}, "ignore")]


def conformance_cases():
    out = []
    m = json.load(open(os.path.join(QWEN_VL, "manifest.json")))
    files = {c["id"]: os.path.join(QWEN_VL, c["input"]["path"]) for c in m["image_cases"]}
    for c in m["chat_cases"]:
        out.append(("cf_" + c["id"], c["messages"], {n: files[n] for n in c["images_used"]}, "ignore"))
    h = json.load(open(os.path.join(QWEN_VL_HUB, "manifest.json")))
    hfiles = {c["id"]: os.path.join(ROOT, c["file"]) for c in h["image_cases"]}
    for c in h["chat_cases"]:
        names = [i["image"] for t in c["messages"] if isinstance(t["content"], list) for i in t["content"]
                 if i.get("type") == "image"]
        out.append(("hub_" + c["id"], c["messages"], {n: hfiles[n] for n in names}, "ignore"))
    return out


def image_names(messages):
    return [i["image"] for t in messages if isinstance(t["content"], list) for i in t["content"]
            if i.get("type") == "image"]


def link(src, dst):
    if os.path.exists(dst):
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_cases(work, groups):
    cases = []
    for group, items in groups:
        for cid, messages, files, exif in items:
            d = os.path.join(work, "samples", cid)
            os.makedirs(d, exist_ok=True)
            names = {n: n + os.path.splitext(files[n])[1] for n in files}
            for n, f in names.items():
                link(files[n], os.path.join(d, f))
            msgs = json.loads(json.dumps(messages))
            for t in msgs:
                if isinstance(t["content"], list):
                    for i in t["content"]:
                        if i.get("type") == "image":
                            i["image"] = names[i["image"]]
            with open(os.path.join(d, "sample.json"), "w", encoding="utf-8") as f:
                json.dump({"id": cid, "messages": msgs}, f, ensure_ascii=False)
            cases.append({"id": cid, "group": group, "exif": exif, "messages": msgs,
                          "sample": os.path.join(d, "sample.json"),
                          "images": [os.path.join(d, n) for n in image_names(msgs)]})
    return cases


VARIANT_OPTIONS = {"builtin": [], "model": ["--chat-template", "model"], "tf5.18": ["--transformers", "5.18"]}


def encode_all(stoker, work, families, cases, variants, jobs):
    tasks = []
    for family in families:
        for variant in variants:
            for case in cases:
                out = os.path.join(work, "enc", family, variant, case["id"])
                tasks.append((family, variant, case, out))

    def run(task):
        family, variant, case, out = task
        if os.path.exists(os.path.join(out, "FAILED")):
            return 2  # refused in an earlier run of this work folder
        if os.path.exists(os.path.join(out, "input_ids.npy")):
            return 0
        cmd = [stoker, "encode", "--model", os.path.join(work, "models", family), "--sample", case["sample"],
               "--out", out, "--exif", case["exif"], "--max-seq-len", "0"] + VARIANT_OPTIONS[variant]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "FAILED"), "w") as f:
                f.write((p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")[-2000:])
        return p.returncode

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        codes = list(ex.map(run, tasks))
    return {"encodes": len(tasks), "failed": sum(1 for c in codes if c), "seconds": round(time.time() - t0, 1)}


def serve_data(work):
    """Ten records, four with images (one with two), six text-only."""
    d = os.path.join(work, "serve", "data")
    os.makedirs(d, exist_ok=True)
    A, C, K, R, G = ("skimage__astronaut", "skimage__chelsea", "skimage__coffee", "skimage__rocket", "skimage__camera")
    for n in (A, C, K, R, G):
        link(photo(n), os.path.join(d, n + ".jpg"))
    # Under the default --seed 1234 `stoker plan` pairs them (1, 2) (4, 0) (3, 6) (5, 9) (8, 7): two batches without an
    # image, one of images only, two mixed.
    recs = [
        [user(img(A + ".jpg"), txt("Who is this?")), assistant("An astronaut.")],
        [user(txt("What is the capital of France?")), assistant("Paris.")],
        [system("Be brief."), user(txt("Say hi.")), assistant("Hi.")],
        [user(img(C + ".jpg"), img(K + ".jpg"), txt("Compare.")), assistant("A cat and a coffee.")],
        [user(img(R + ".jpg"), txt("What is it?")), assistant("A rocket."), user(txt("Is it flying?")), assistant("No.")],
        [user(txt("Count to three.")), assistant("One, two, three."), user(txt("And back?")), assistant("Three, two, one.")],
        [system("You are a poet."), user(txt("A line about rain.")), assistant("Rain writes on the window in silver.")],
        [user(txt("Spell cat.")), assistant("C-A-T.")],
        [user(img(G + ".jpg"), txt("What is the man holding?")), assistant("A camera.")],
        [user(txt("Translate 'thank you' to German.")), assistant("Danke.")],
    ]
    path = os.path.join(d, "train.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i, m in enumerate(recs):
            f.write(json.dumps({"id": f"s{i}", "messages": m}, ensure_ascii=False) + "\n")
    return path, len(recs)


def run_worker(py, what, work, tag):
    out = os.path.join(work, f"{what}-{tag}.json")
    logf = os.path.join(work, f"{what}-{tag}.log")
    t0 = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    with open(logf, "w") as lf:
        p = subprocess.run([py, os.path.join(HERE, "hf_worker.py"), what, work, out], stdout=lf, stderr=subprocess.STDOUT,
                           env=env)
    secs = round(time.time() - t0, 1)
    if p.returncode != 0 or not os.path.exists(out):
        return {"error": f"hf_worker.py {what} exited with {p.returncode}; see {logf}", "seconds": secs}
    r = json.load(open(out))
    r["seconds"] = secs
    return r


def venv_version(py):
    p = subprocess.run([py, "-c", "import transformers; print(transformers.__version__)"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{py}: cannot import transformers:\n{p.stderr[-1000:]}")
    return p.stdout.strip().splitlines()[-1]


# ----------------------------------------------------------------------------------------------- report

def yes(n, total):
    return f"{n}/{total}" + ("" if n == total else " ✗")


def code(msg):
    """An error message as inline code in a table cell (its own backticks would end the span)."""
    return "`" + str(msg).replace("`", "'").replace("|", "/") + "`"


def fmt(x):
    if x is None:
        return "–"
    if isinstance(x, float):
        return "0" if x == 0 else f"{x:.3g}"
    return str(x)


def parity_tables(results, lines, failures):
    lines.append("### 1. Processor parity (`stoker encode` vs `AutoProcessor`)\n")
    lines.append("Slow processor (`use_fast=False`): bit for bit. Counts are cases that agree / cases compared; "
                 "`mm_token_type_ids` is the processor's against the §3 rule applied to Stoker's `input_ids`.\n")
    lines.append("| transformers | family | template | cases pass | text | input_ids | attention_mask | pixel_values (bit) | "
                 "image_grid_thw | mm_token_type_ids | Stoker refused | R1 on the sample |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    fast_rows = []
    for ver, r in results:
        if "error" in r:
            lines.append(f"| {ver} | – | – | worker failed: {r['error']} | | | | | | | | |")
            failures.append(f"parity worker {ver}: {r['error']}")
            continue
        by = {}
        for c in r["cases"]:
            by.setdefault((c["family"], c["variant"]), []).append(c)
        for (family, variant), cs in by.items():
            def count(name):
                got = [t["equal"] for c in cs for t in c.get("tensors", []) if t["tensor"] == name]
                return yes(sum(got), len(got)) if got else "–"
            texts = [c["text_equal"] for c in cs if "text_equal" in c]
            pos = [c["positions"]["equal_attended"] for c in cs if "positions" in c]
            refuse = [c for c in cs if "stoker_error" in c]
            npass = sum(1 for c in cs if c.get("pass"))
            lines.append(f"| {ver} | {family} | {variant} | {yes(npass, len(cs))} | {yes(sum(texts), len(texts))} | "
                         f"{count('input_ids')} | {count('attention_mask')} | {count('pixel_values')} | "
                         f"{count('image_grid_thw')} | {count('mm_token_type_ids(rule on Stoker ids)')} | "
                         f"{len(refuse)} | {yes(sum(pos), len(pos))} |")
            for c in cs:
                if not c.get("pass"):
                    failures.append(describe_parity_failure(ver, c))
            fs = [c["fast"] for c in cs if "fast" in c]
            with_img = [f for f in fs if "pixel_values_max_abs_diff" in f or "pixel_values_shape" in f]
            diffs = [f["pixel_values_max_abs_diff"] for f in with_img if "pixel_values_max_abs_diff" in f]
            fast_rows.append(
                f"| {ver} | {family} | {variant} | {yes(sum(f['input_ids_equal'] for f in fs), len(fs))} | "
                f"{yes(sum(f.get('image_grid_thw_equal', False) for f in with_img), len(with_img))} | "
                f"{yes(sum(1 for f in with_img if f.get('pixel_values_bit_equal')), len(with_img))} | "
                f"{fmt(max(diffs) if diffs else None)} | {fmt(min(diffs) if diffs else None)} |")
    lines.append("")
    for ver, r in results:
        for family, pr in r.get("processors", {}).items():
            if "slow_bounds" not in pr:
                continue
            b = pr["slow_bounds"]
            ctl = [c["control"]["pass"] for c in r["cases"] if c["family"] == family and "control" in c]
            lines.append(f"- {ver} {family}: the slow image processor took the pixel bounds {b['slow_processor']}, the folder "
                         f"gives {b['folder']}. Control, the same slow processor with the folder's bounds set by hand "
                         f"(`size`, `min_pixels`, `max_pixels`): input_ids, attention_mask, pixel_values (bit) and "
                         f"image_grid_thw equal to Stoker's in {yes(sum(ctl), len(ctl))} comparisons.")
    text_only = sorted({(tuple(c.get("hf_keys_text_only", [])), tuple(c["stoker_pixel_values_shape"]),
                         tuple(c["stoker_image_grid_thw_shape"])) for _, r in results for c in r.get("cases", [])
                        if "stoker_pixel_values_shape" in c})
    for keys, pv, thw in text_only:
        lines.append(f"- Text-only samples: the processor returns {', '.join(keys)}; `stoker encode` writes `pixel_values` "
                     f"{list(pv)} and `image_grid_thw` {list(thw)}.")
    lines.append("")
    lines.append("Default (fast, torchvision) processor against Stoker: ids and grids must agree; pixels are expected "
                 "to differ slightly (its bicubic resize is not Pillow's).\n")
    lines.append("| transformers | family | template | input_ids equal | image_grid_thw equal | pixel_values bit-equal | "
                 "max abs diff (max over cases) | max abs diff (min over cases) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    lines += fast_rows
    lines.append("")


def describe_parity_failure(ver, c):
    head = f"parity {ver} {c['family']} {c['variant']} {c['case']}:"
    if "error" in c:
        return f"{head} the check crashed: {c['error']}"
    if "stoker_error" in c:
        made = (f": image_grid_thw {c['hf_image_grid_thw']}, pixel_values {c['hf_pixel_values_shape']}"
                if "hf_image_grid_thw" in c else "")
        return f"{head} Stoker refused ({c['stoker_error'][:200]}) but transformers did not{made}"
    if "hf_error" in c:
        return f"{head} transformers refused ({c['hf_error']}) but Stoker encoded it"
    parts = []
    if not c.get("text_equal", True):
        parts.append(f"text differs at char {c['text_first_diff']['char']}: Stoker {c['text_first_diff']['stoker']!r} "
                     f"vs HF {c['text_first_diff']['hf']!r}")
    for t in c.get("tensors", []):
        if not t["equal"]:
            if t.get("why") == "shape":
                parts.append(f"{t['tensor']} shape Stoker {t['stoker_shape']} vs HF {t['hf_shape']}")
            elif t.get("why") == "dtype":
                parts.append(f"{t['tensor']} dtype Stoker {t['stoker_dtype']} vs HF {t['hf_dtype']}")
            else:
                parts.append(f"{t['tensor']}: {t['differing']} values differ, first at {t['first_index']}: Stoker "
                             f"{t['stoker_value']!r} vs HF {t['hf_value']!r}"
                             + (f", max abs diff {t['max_abs_diff']:.3g}" if "max_abs_diff" in t else ""))
    p = c.get("positions", {})
    if p and not p.get("equal_attended", True):
        parts.append(f"position_ids differ on attended tokens, first at {p.get('first_index')}: Stoker "
                     f"{p.get('stoker_value')} vs model {p.get('hf_value')}")
    return head + " " + "; ".join(parts)


def serve_tables(results, lines, failures):
    lines.append("### 2. Position ids on served batches (R1, R8) and 3. `model(**batch)` (R5, R10, dummy image)\n")
    lines.append("Batches of `stoker serve --ranks 1 --batch 2` read with `stoker.Loader`; tiny random-init model "
                 "(2 text layers, hidden 32; real token ids, patch and merge sizes). R1: the model's `get_rope_index` "
                 "against Stoker's `position_ids` on attended tokens (whole tensor and pad values alongside). R8: logits "
                 "with Stoker's `position_ids` against the model's own positions (`position_ids` left out; on ≥5.3 with "
                 "`mm_token_type_ids` by the §3 rule), on attended tokens, sdpa and eager.\n")
    lines.append("| transformers | family | --text-only | batches (images / dummy / text-only) | `model(**batch)` runs, finite loss | "
                 "`sample_index` kept out | R1 attended | R1 whole tensor | pads Stoker → model | R8 bit-equal (sdpa, eager) | R8 max abs diff |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    dummy_rows, extra_rows, refusals = [], [], []
    for ver, r in results:
        if "error" in r:
            lines.append(f"| {ver} | worker failed: {r['error']} | | | | | | | | | |")
            failures.append(f"serve worker {ver}: {r['error']}")
            continue
        for family, fam in r["families"].items():
            for mode, m in fam["modes"].items():
                if "error" in m:
                    lines.append(f"| {ver} | {family} | {mode} | serve/read failed: {m['error']} | | | | | | | |")
                    failures.append(f"serve {ver} {family} {mode}: {m['error']}")
                    continue
                bs = m["batches"]
                kinds = [b["kind"] for b in bs]
                ran = [b for b in bs if "loss" in b and b.get("finite")]
                crashed = [b for b in bs if "forward_error" in b]
                pos = [b["positions"] for b in bs if "equal_attended" in b.get("positions", {})]
                perr = [b["positions"]["error"] for b in bs if "error" in b.get("positions", {})]
                l8 = [b["logits_explicit_vs_model_positions"] for b in bs if "logits_explicit_vs_model_positions" in b]
                eq8 = {a: sum(1 for x in l8 if x.get(a, {}).get("bit_equal")) for a in ("sdpa", "eager")}
                d8 = [x[a]["max_abs_diff"] for x in l8 for a in x if "max_abs_diff" in x[a]]
                pads = sorted({(tuple(p["pad_values_stoker"]), tuple(p["pad_values_hf"])) for p in pos})
                run_txt = yes(len(ran), len(bs))
                if crashed:
                    run_txt += "; " + "; ".join(
                        f"{b['kind']} batch {b['sample_index']} raised {code(b['forward_error'])}"
                        + (f", without the empty pixel keys loss {b['loss_without_empty_pixel_keys']:.6f}"
                           if "loss_without_empty_pixel_keys" in b else "") for b in crashed)
                lines.append(
                    f"| {ver} | {family} | {mode} | {len(bs)} ({kinds.count('images')} / {kinds.count('dummy-image')} / "
                    f"{kinds.count('text-only')}) | {run_txt} | {yes(sum(1 for b in bs if not b['sample_index_in_inputs']), len(bs))} | "
                    f"{yes(sum(p['equal_attended'] for p in pos), len(bs))} | {sum(p['equal_whole'] for p in pos)}/{len(pos)} | "
                    f"{', '.join(f'{list(a)} → {list(b)}' for a, b in pads) or '–'} | "
                    f"{eq8['sdpa']}/{len(l8)}, {eq8['eager']}/{len(l8)} | {fmt(max(d8) if d8 else None)} |")
                if m.get("connections_refused"):
                    refusals.append(f"{ver} {family} {mode}: {m['connections_refused']}")
                if perr:
                    failures.append(f"R1 {ver} {family} {mode}: get_rope_index raised {perr[0]}")
                for b in bs:
                    p = b.get("positions", {})
                    if "equal_attended" in p and not p["equal_attended"]:
                        failures.append(f"R1 {ver} {family} {mode} batch {b['sample_index']}: position_ids differ on "
                                        f"attended tokens, first at {p.get('first_index')}: Stoker {p.get('stoker_value')} "
                                        f"vs model {p.get('hf_value')}")
                    for a, x in b.get("logits_explicit_vs_model_positions", {}).items():
                        if "error" in x or not x.get("bit_equal"):
                            failures.append(f"R8 {ver} {family} {mode} {a} batch {b['sample_index']}: "
                                            + (x.get("error") or f"max abs diff {x['max_abs_diff']:.3g}"))
                    if mode == "dummy-image" and "loss" not in b:
                        failures.append(f"R10 {ver} {family} dummy-image batch {b['sample_index']} ({b['kind']}): "
                                        f"{b.get('forward_error')}")
                    if mode == "allow" and b["kind"] != "text-only" and "loss" not in b:
                        failures.append(f"R10 {ver} {family} allow batch {b['sample_index']} ({b['kind']}): "
                                        f"{b.get('forward_error')}")
                    if b["sample_index_in_inputs"]:
                        failures.append(f"R10 {ver} {family} {mode}: sample_index among the model inputs")
            dv = fam.get("dummy_vs_allow", [])
            if not dv:
                failures.append(f"dummy {ver} {family}: no dummy-image batch to compare")
            for d in dv:
                if "error" in d:
                    failures.append(f"dummy {ver} {family} {d['sample_index']}: {d['error']}")
                    continue
                ok = d["rel_diff"] <= TOLERANCE and d["same_attended_tokens"]
                if not ok:
                    failures.append(f"dummy {ver} {family} {d['sample_index']}: loss {d['loss_dummy']!r} with the dummy vs "
                                    f"{d['loss_allow']!r} without (rel {d['rel_diff']:.3g})")
                dummy_rows.append(
                    f"| {ver} | {family} | {d['sample_index']} | {d['dummy_shapes']['input_ids']} vs {d['allow_shapes']['input_ids']}, "
                    f"pixel_values {d['dummy_shapes'].get('pixel_values')} vs {'absent' if 'pixel_values' not in d['allow_shapes'] else d['allow_shapes']['pixel_values']} | "
                    f"{d['loss_dummy']:.9g} | {d['loss_allow']:.9g} | {fmt(d['abs_diff'])} | {fmt(d['rel_diff'])} | "
                    f"{fmt(d['logits_max_abs_diff_attended'])} | {'pass' if ok else 'FAIL'} |")
            ex = fam.get("extra", {})
            if "R9" in ex:
                e = ex["R9"]
                extra_rows.append(f"| {ver} | {family} | R9: no `position_ids`, no `mm_token_type_ids` | "
                                  + (f"raised {code(e['error'])}" if e["outcome"] == "raised" else
                                     f"ran: loss {e['loss']:.6f} vs {e['loss_explicit']:.6f}, logits max abs diff {e['logits_max_abs_diff']:.3g}")
                                  + " |")
            if "R11" in ex:
                e = ex["R11"]
                extra_rows.append(f"| {ver} | {family} | R11: B=1, 3 rows, `attention_mask=None`, `use_cache=False` | "
                                  + (f"error {code(e['error'])}" if "error" in e else
                                     f"loss {e['loss_with_mask']:.6f} with the mask, {e['loss_mask_none_use_cache_false']:.6f} "
                                     f"without ({'differs' if e['mask_none_differs'] else 'same'}); 4 rows without the mask "
                                     f"{e['loss_4rows_mask_none']:.6f} ({'matches' if e['four_rows_matches'] else 'differs'})")
                                  + " |")
    lines.append("")
    if refusals:
        lines.append("The service refused the first connection(s) right after its socket file appeared (the file exists a "
                     "moment before connections are accepted); the client connected on a retry: " + "; ".join(refusals) + ".\n")
    lines.append(f"Dummy image: the loss of each dummy-image batch against the batch of the same samples under `allow` "
                 f"with its empty `pixel_values`/`image_grid_thw` removed; pass when the relative difference is at most "
                 f"{TOLERANCE:g} and the attended tokens are the same.\n")
    lines.append("| transformers | family | samples | input_ids, pixel_values with vs without | loss with dummy | loss without | "
                 "abs diff | rel diff | logits max abs diff (attended) | |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    lines += dummy_rows
    lines.append("")
    if extra_rows:
        lines.append("Further rows of §8 on the same batches (recorded, not judged):\n")
        lines.append("| transformers | family | row | outcome |")
        lines.append("|---|---|---|---|")
        lines += extra_rows
        lines.append("")


# A dummy-image batch is longer (the dummy's tokens follow the first sample), so every matmul and softmax reduces
# over a different length; masked keys add exact zeros, but the blocking of float32 sums changes. 1e-5 relative is
# about 100 float32 ulps of the loss: far above that noise, far below any real change (a token attended or labelled
# differently moves a random model's loss by 1e-3 or more).
TOLERANCE = 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("venv_python", nargs="*", help="python of an environment with transformers (make_venvs.sh)")
    ap.add_argument("--work", help="work folder (default: a new temporary one, kept)")
    ap.add_argument("--stoker", default=os.path.join(ROOT, "stoker"), help="the launcher (default: this tree's)")
    ap.add_argument("--variants", default="builtin,model",
                    help="chat template modes to encode with: builtin (Stoker's, the default), model (--chat-template "
                         "model); tf5.18 is added when the launcher has --transformers")
    ap.add_argument("--jobs", type=int, default=2, help="concurrent `stoker encode` runs")
    ap.add_argument("--skip-parity", action="store_true")
    ap.add_argument("--skip-serve", action="store_true")
    ap.add_argument("--families", default=",".join(model_folders.FAMILIES))
    ap.add_argument("--report-only", action="store_true", help="rewrite WORK/report.md from WORK/results.json")
    a = ap.parse_args()
    if a.report_only:
        if not a.work:
            ap.error("--report-only needs --work")
        saved = json.load(open(os.path.join(a.work, "results.json")))
        return report(a.work, saved["meta"], list(saved["parity"].items()), list(saved["serve"].items()))
    if not a.venv_python:
        ap.error("give the python of at least one environment with transformers (make_venvs.sh)")
    t_start = time.time()
    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="stoker-hf-check-"))
    os.makedirs(work, exist_ok=True)
    families = a.families.split(",")
    versions = [(venv_version(py), py) for py in a.venv_python]
    print(f"work folder {work}; transformers {', '.join(v for v, _ in versions)}", flush=True)

    help_text = subprocess.run([a.stoker, "encode", "--help"], capture_output=True, text=True).stdout
    variants = a.variants.split(",")
    if "--transformers" in help_text and "tf5.18" not in variants:
        variants.append("tf5.18")

    for f in families:
        model_folders.write(os.path.join(work, "models", f), f)
    cases = write_cases(work, [("conformance", conformance_cases()), ("photos", photo_cases()), ("exif", exif_cases()),
                                    ("refusal", refusal_cases())])
    data, n = serve_data(work)
    plan = {"root": ROOT, "work": work, "stoker": os.path.abspath(a.stoker), "families": families, "variants": variants,
            "cases": cases,
            "serve": {"data": data, "records": n, "batch": 2, "steps": (n + 1) // 2, "max_pixels": 100352}}
    json.dump(plan, open(os.path.join(work, "plan.json"), "w"), indent=1, ensure_ascii=False)

    enc = None
    parity, serve = [], []
    if not a.skip_parity:
        enc = encode_all(a.stoker, work, families, cases, variants, a.jobs)
        print(f"stoker encode: {enc['encodes']} runs, {enc['failed']} refused, {enc['seconds']} s", flush=True)
        for ver, py in versions:
            r = run_worker(py, "parity", work, ver)
            print(f"parity {ver}: {r.get('seconds')} s {r.get('error', '')}", flush=True)
            parity.append((ver, r))
    if not a.skip_serve:
        os.makedirs(os.path.join(work, "serve"), exist_ok=True)
        for ver, py in versions:
            r = run_worker(py, "serve", work, ver)
            print(f"serve {ver}: {r.get('seconds')} s {r.get('error', '')}", flush=True)
            serve.append((ver, r))

    meta = {"started": datetime.datetime.fromtimestamp(t_start).astimezone().isoformat(timespec="seconds"),
            "host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "seconds": round(time.time() - t_start), "samples": len(cases), "families": families,
            "variants": variants, "encode": enc}
    return report(work, meta, parity, serve)


def report(work, meta, parity, serve):
    failures = []
    enc = meta.get("encode")
    lines = [f"Run {meta['started']} on {meta['host']} ({meta['platform']}, {meta['cpus']} CPUs), {meta['seconds']} s; "
             f"{meta['samples']} samples × {len(meta['families'])} families × {len(meta['variants'])} template modes"
             + (f"; {enc['encodes']} encodes ({enc['failed']} refused) in {enc['seconds']} s" if enc else "") + ".\n"]
    env = [r for _, r in parity + serve if "torch" in r]
    if env:
        seen = {}
        for r in env:
            seen[(r["transformers"], r["torch"])] = r.get("pillow") or seen.get((r["transformers"], r["torch"]))
        lines.append("Environments: " + "; ".join(f"transformers {t}, torch {to}" + (f", Pillow {p}" if p else "")
                                                  for (t, to), p in sorted(seen.items())) + ".\n")
    if parity:
        parity_tables(parity, lines, failures)
        procs = [(ver, r["processors"]) for ver, r in parity if "processors" in r]
        for ver, p in procs:
            lines.append(f"Processors loaded by {ver}: " + "; ".join(
                f"{fam}: slow {'/'.join(v['slow'][1:])}, default {'/'.join(v['default'][1:])}" for fam, v in p.items()) + ".\n")
    if serve:
        serve_tables(serve, lines, failures)
    lines.append("### Failures\n")
    lines += [f"- {f}" for f in failures] or ["None."]
    text = "\n".join(lines) + "\n"
    open(os.path.join(work, "report.md"), "w").write(text)
    json.dump({"meta": meta, "parity": dict(parity), "serve": dict(serve), "failures": failures},
              open(os.path.join(work, "results.json"), "w"), indent=1)
    print(text)
    print(f"report: {os.path.join(work, 'report.md')}; raw results: {os.path.join(work, 'results.json')}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
