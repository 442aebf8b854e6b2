"""Glue check: trains a tiny random-init Qwen2-VL with Stoker's Hugging Face Trainer glue and its Lightning glue
against a real ``stoker serve``, checkpoints, restarts the service, resumes (also at another world size), and
checks that the resumed run continues at the saved cursor. tools/glue-check/RESULTS.md has what ran and what
came out. Not part of CI: it needs transformers, accelerate and lightning.

    <venv>/bin/python tools/glue-check/run.py --stoker-home /work/main --work /tmp/glue-check [--scenarios …]

The client is taken from this checkout (clients/python). ``--stoker-home``: a checkout whose stoker-cli/target
holds a built CLI (``stoker-cli.jar`` and ``lib/``); the service runs as ``java … dev.stoker.cli.Main serve`` on
JDK 25 (``--java``), as ``./stoker`` runs it, without the launcher's rebuild check.

A scenario (``hf-1to1``, ``lightning-1to1``, ``hf-2to1``, ``lightning-2to1``: framework, world size of phase 1,
world size of phase 2) runs, each against a fresh service (a restarted trainer needs a restarted service: the
service moves to a resuming trainer's cursor only before it has welcomed any):

1. reference: plain Loaders, one per rank, read the batches (no framework, no training);
2. phase 1: the glue trains K optimizer steps in a worker process (torchrun for 2 ranks, gloo on the CPU),
   checkpointing at step K; the run ends;
3. phase 2: a new worker (new model, new trainer) resumes from that checkpoint and trains to N steps; after a
   resize its reference is what plain Loaders read from the saved state on a fresh service of the new size.

Checks: each rank trained on exactly its own batches as the service made them (names, shapes, sums), none
re-batched, dropped or re-sharded; the checkpoint holds the cursor after the last batch trained on (not after
the last fetched: Lightning fetches one ahead); every rank of phase 2 loaded it, and its first batch is the
one at that cursor; within one epoch no sample is trained on twice across the restart. ``hf-stock-1`` and
``hf-stock-2`` are a control, not a check: the stock ``Trainer`` handed ``TorchIterableDataset``.
Writes a JSON report (``--report``, default WORK/report.json) and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import torch  # noqa: E402

from stoker import Loader  # noqa: E402
from stoker.integrations import STATE_FILE, StokerDataset, read_state  # noqa: E402

JVM_FLAGS = ["--enable-native-access=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
             "--sun-misc-unsafe-memory-access=allow", "-Dai.djl.offline=true", "-Djava.awt.headless=true"]
IMAGES = ["jpeg_420_160x120.jpg", "png_rgb.png", "png_rgba.png", "jpeg_444_160x120.jpg"]
JOB = "glue"
SAMPLES = 40
BATCH = 2


def make_dataset(stoker_home: str, folder: str) -> str:
    """40 single-image samples over 4 test images (testdata/images of the Stoker checkout)."""
    os.makedirs(folder, exist_ok=True)
    for name in IMAGES:
        shutil.copy(os.path.join(stoker_home, "testdata", "images", name), os.path.join(folder, name))
    path = os.path.join(folder, "train.jsonl")
    with open(path, "w") as f:
        for i in range(SAMPLES):
            f.write(json.dumps({"id": f"s{i}", "image": IMAGES[i % len(IMAGES)], "conversations": [
                {"from": "human", "value": f"<image>\nWhat is in picture {i}? " + "Look closely. " * (i % 3)},
                {"from": "gpt", "value": f"Answer {i}."}]}) + "\n")
    return path


class Service:
    """A ``stoker serve`` child process on a socket of its own; stopped with SIGTERM."""

    #: the job's settings, the same for every run (the fingerprint a resume is checked against)
    ARGS = ["--job", JOB, "--processor", "qwen2-vl", "--max-pixels", "12544", "--max-seq-len", "256",
            "--max-images", "1", "--batch", str(BATCH), "--shm-budget", "128M", "--threads", "2"]

    def __init__(self, a, data: str, work: str, name: str, transformers_version: str, ranks: int = 1):
        self.socket = os.path.join(work, f"{name}.sock")
        shm = os.path.join(work, "shm")
        os.makedirs(shm, exist_ok=True)
        home = a.stoker_home
        self.cmd = [a.java, *JVM_FLAGS, f"-Dstoker.home={home}", "-cp",
                    f"{home}/stoker-cli/target/stoker-cli.jar:{home}/stoker-cli/target/lib/*", "dev.stoker.cli.Main",
                    "serve", *self.ARGS, "--data", data, "--ranks", str(ranks), "--socket", self.socket,
                    "--shm-dir", shm, "--transformers", transformers_version]
        self.log = os.path.join(work, f"{name}-serve.log")
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"stoker serve did not come up: {open(self.log).read()}")
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def tiny_qwen2_vl(seed: int):
    """A random-init Qwen2-VL small enough for a CPU: 1 text layer of width 32, a 1-block vision tower; the
    real vocabulary (the batches hold Qwen2 token ids) and the real patch geometry (1176 = 3·2·14·14)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, in_channels=3,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vocab_size=151936,
        hidden_size=32)
    torch.manual_seed(seed)
    return Qwen2VLForConditionalGeneration(cfg)


def record(meta, batch) -> dict:
    """What the check compares of a batch trained on: its global step and samples (the service's word), and
    the tensors' names, shapes and sums as the model got them."""
    return {"global_step": int(meta.global_step), "samples": [int(x) for x in meta.sample_index],
            "shapes": {k: list(v.shape) for k, v in batch.items()},
            "sums": {k: float(v.double().sum()) for k, v in batch.items()}}


def reference(svc: Service, world: int, batches: int, state: Optional[dict] = None) -> list:
    """Each rank's first ``batches`` batches as plain Loaders read them (no framework, no training), from
    ``state`` when given; one thread per rank, as the ranks of a job read at once."""
    out = [None] * world

    def read(rank):
        got = []
        with Loader(svc.socket, rank, world, job=JOB, as_torch=True, timeout=60) as loader:
            if state is not None:
                loader.load_state_dict(state)
            for batch in loader:
                got.append(record(loader.last_meta, batch))
                if len(got) == batches:
                    break
        out[rank] = got

    threads = [threading.Thread(target=read, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if any(o is None for o in out):
        raise RuntimeError("a reference reader failed (see above)")
    return out


# ---------------------------------------------------------------------- the trainers (run as workers)

def hf_train(w) -> dict:
    """One rank of a Hugging Face Trainer run over the feed (under torchrun when the world is larger than 1)."""
    from transformers import TrainerCallback, TrainingArguments
    from stoker.integrations.hf import StokerTrainer

    seen_by_model, added, log, loaded = [], set(), [], {}

    class Recorder(TrainerCallback):
        """After each micro-step the dataset's consumed_meta is the batch just trained on."""

        def on_substep_end(self, args, state, control, **kw):
            log.append(record(ds.consumed_meta, seen_by_model[-1]))

        on_step_end = on_substep_end

    def remember(module, args, kwargs):
        """A forward pre-hook on the model itself (a wrapper would change the signature the Trainer inspects)."""
        # the Trainer adds num_items_in_batch (its loss normalization) to the batch's own keywords
        seen_by_model.append({k: v for k, v in kwargs.items() if k != "num_items_in_batch"})
        added.update(k for k in kwargs if k not in seen_by_model[-1])

    ds = StokerDataset.from_socket(w.socket, job=JOB, timeout=60)  # rank and world: torch.distributed's, or 0 and 1
    load = ds.load_state_dict
    ds.load_state_dict = lambda s: (loaded.setdefault("state", s), load(s))[1]
    args = TrainingArguments(output_dir=w.dir, max_steps=w.max_steps, per_device_train_batch_size=1,
                             gradient_accumulation_steps=w.ga, learning_rate=1e-3, save_strategy="steps",
                             save_steps=w.save_steps, logging_steps=1, report_to=[], use_cpu=True,
                             dataloader_num_workers=0, seed=0, disable_tqdm=True,
                             ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None)
    model = tiny_qwen2_vl(0)
    model.register_forward_pre_hook(remember, with_kwargs=True)
    t = StokerTrainer(model=model, args=args, train_dataset=ds)
    t.add_callback(Recorder())
    t.train(resume_from_checkpoint=w.resume)
    return {"rank": ds.loader.rank, "world": ds.loader.world_size, "trained": log, "yielded": ds.loader.batches,
            "loaded": loaded.get("state"), "global_step": t.state.global_step,
            "ignore_data_skip": t.args.ignore_data_skip, "keywords_the_trainer_added": sorted(added),
            "losses": [h["loss"] for h in t.state.log_history if "loss" in h]}


def hf_stock_train(w) -> dict:
    """The control: the stock Trainer handed TorchIterableDataset, as a user would try first. Records what
    the model received, or the error."""
    from transformers import Trainer, TrainingArguments
    from stoker import TorchIterableDataset

    seen = []

    def remember(module, args, kwargs):
        seen.append({k: list(v.shape) for k, v in kwargs.items() if hasattr(v, "shape")})

    ds = TorchIterableDataset(w.socket, job=JOB, timeout=60)
    args = TrainingArguments(output_dir=w.dir, max_steps=w.max_steps, per_device_train_batch_size=1,
                             learning_rate=1e-3, save_strategy="no", report_to=[], use_cpu=True, seed=0,
                             disable_tqdm=True, ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None)
    rank = int(os.environ.get("RANK", "0"))
    error = None
    try:
        model = tiny_qwen2_vl(0)
        model.register_forward_pre_hook(remember, with_kwargs=True)
        Trainer(model=model, args=args, train_dataset=ds).train()
    except Exception as e:  # the point of the control: what goes wrong
        error = f"{type(e).__name__}: {str(e)[:300]}"
    return {"rank": rank, "world": int(os.environ.get("WORLD_SIZE", "1")), "error": error, "model_got": seen[:2],
            "batches_this_rank_read": ds.loader.batches if ds.loader is not None else 0}


def lightning_train(w) -> dict:
    """One rank of a Lightning run over the feed (DDP under torchrun when the world is larger than 1)."""
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.callbacks import ModelCheckpoint
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.callbacks import ModelCheckpoint
    from stoker.integrations.lightning import StokerDataModule

    log, loaded, losses = [], {}, []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_qwen2_vl(0)

        def training_step(self, batch, batch_idx):
            log.append(record(self.trainer.datamodule.dataset.consumed_meta, batch))
            loss = self.model(**batch).loss
            losses.append(float(loss))
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dm = StokerDataModule(StokerDataset.from_socket(w.socket, job=JOB, timeout=60))
    load = dm.dataset.load_state_dict
    dm.dataset.load_state_dict = lambda s: (loaded.setdefault("state", s), load(s))[1]
    trainer = pl.Trainer(max_steps=w.max_steps, accelerator="cpu", devices=world,
                         strategy="ddp" if world > 1 else "auto", use_distributed_sampler=False, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[ModelCheckpoint(dirpath=w.dir, every_n_train_steps=w.save_steps, save_top_k=-1)])
    trainer.fit(Module(), datamodule=dm, ckpt_path=w.resume)
    return {"rank": dm.dataset.loader.rank, "world": dm.dataset.loader.world_size, "trained": log,
            "yielded": dm.dataset.loader.batches, "loaded": loaded.get("state"), "global_step": trainer.global_step,
            "losses": losses}


def worker(argv) -> int:
    ap = argparse.ArgumentParser(prog="run.py worker")
    ap.add_argument("--framework", choices=["hf", "lightning", "hf-stock"], required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True, help="output_dir (hf) / checkpoint folder (lightning)")
    ap.add_argument("--max-steps", type=int, required=True)
    ap.add_argument("--save-steps", type=int, required=True)
    ap.add_argument("--ga", type=int, default=1)
    ap.add_argument("--resume", default=None, help="a checkpoint to resume from")
    ap.add_argument("--result", required=True, help="writes RESULT.rank<R>.json")
    w = ap.parse_args(argv)
    result = {"hf": hf_train, "lightning": lightning_train, "hf-stock": hf_stock_train}[w.framework](w)
    with open(f"{w.result}.rank{result['rank']}.json", "w") as f:
        json.dump(result, f)
    return 0


# ---------------------------------------------------------------------- the scenarios

def launch(a, framework, svc, world, folder, max_steps, save_steps, ga, resume, result) -> list:
    """Runs the worker on ``world`` ranks (torchrun for more than one) and returns each rank's result."""
    worker_args = [os.path.abspath(__file__), "worker", "--framework", framework, "--socket", svc.socket,
                   "--dir", folder, "--max-steps", str(max_steps), "--save-steps", str(save_steps), "--ga", str(ga),
                   "--result", result] + (["--resume", resume] if resume else [])
    if world == 1:
        cmd = [sys.executable] + worker_args
    else:
        a.port += 1
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_port",
               str(a.port)] + worker_args
    log = result + ".log"
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}); its output: {log}\n" + open(log).read()[-4000:])
    return [json.load(open(f"{result}.rank{rank}.json")) for rank in range(world)]


def control(a, data, tv, world) -> dict:
    """The stock Trainer on TorchIterableDataset (no glue): what it does with a Stoker feed. Not a check."""
    name = f"hf-stock-{world}"
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    svc = Service(a, data, work, "control", tv, world)
    try:
        try:
            ranks = launch(a, "hf-stock", svc, world, os.path.join(work, "out"), 2, 2, 1, None,
                           os.path.join(work, "control"))
        except RuntimeError as e:
            ranks = [{"failed": str(e)[-1500:]}]
    finally:
        svc.stop()
    return {"scenario": name, "control": True, "ok": True, "checks": {}, "ranks": ranks}


def scenario(a, data, tv, framework, world1, world2) -> dict:
    """Phase 1 on ``world1`` ranks, checkpoint, restart the service, phase 2 on ``world2`` ranks from it."""
    name = f"{framework}-{world1}to{world2}"
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    k, n = a.steps_first, a.steps_total
    ga = 2 if framework == "hf" else 1  # batches per optimizer step
    folder = os.path.join(work, "out")

    svc = Service(a, data, work, "reference1", tv, world1)
    try:
        expected1 = reference(svc, world1, (n if world1 == world2 else k) * ga)
    finally:
        svc.stop()
    svc = Service(a, data, work, "phase1", tv, world1)
    try:
        phase1 = launch(a, framework, svc, world1, folder, k, k, ga, None, os.path.join(work, "phase1"))
    finally:
        svc.stop()
    if framework == "hf":
        ckpt = os.path.join(folder, f"checkpoint-{k}")
        files = sorted(os.listdir(ckpt))
        saved = read_state(ckpt)
    else:
        files = sorted(os.listdir(folder))
        ckpt = os.path.join(folder, f"epoch=0-step={k}.ckpt")
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)["StokerDataModule"]["stoker_loader"]
    if world1 == world2:
        expected2 = [e[k * ga:] for e in expected1]
    else:  # after a resize: what plain Loaders read from the saved state on a fresh service of the new size
        svc = Service(a, data, work, "reference2", tv, world2)
        try:
            expected2 = reference(svc, world2, (n - k) * ga, state=saved)
        finally:
            svc.stop()
    svc = Service(a, data, work, "phase2", tv, world2)
    try:
        phase2 = launch(a, framework, svc, world2, folder, n, k, ga, ckpt, os.path.join(work, "phase2"))
    finally:
        svc.stop()

    checks = {}
    trained1 = [p["trained"] for p in phase1]
    trained2 = [p["trained"] for p in phase2]
    key = lambda b: (b["global_step"], b["samples"], b["shapes"], b["sums"])  # noqa: E731
    checks["phase 1: each rank trained on its own batches, those plain Loaders of its rank read, in order"] = \
        all([key(b) for b in t] == [key(b) for b in e[:len(t)]] for t, e in zip(trained1, expected1))
    checks["phase 1: each rank trained on as many batches as its steps take (nothing re-batched or dropped)"] = \
        all(len(t) == k * ga for t in trained1)
    last = max(b["global_step"] for t in trained1 for b in t)
    checks["the saved cursor is the one after the last batch trained on"] = (
        saved is not None and saved["next_step"] == last + 1
        and (saved["epoch"], saved["position"]) == divmod((last + 1) * world1 * BATCH, SAMPLES))
    checks["every rank of phase 2 loaded the checkpoint's state"] = all(p["loaded"] == saved for p in phase2)
    checks["phase 2's first batch is the one at the saved cursor"] = all(
        t and t[0]["global_step"] == saved["next_step"] for t in trained2)
    checks["phase 2: each rank trained on the batches plain Loaders read from the saved cursor"] = \
        all([key(b) for b in t] == [key(b) for b in e] for t, e in zip(trained2, expected2))
    samples1 = [s for t in trained1 for b in t for s in b["samples"]]
    samples2 = [s for t in trained2 for b in t for s in b["samples"]]
    if ((last + 1) * world1 + (n - k) * ga * world2) * BATCH <= SAMPLES:  # all within the first epoch
        checks["no sample trained on twice across the restart (one epoch)"] = \
            len(set(samples1 + samples2)) == len(samples1) + len(samples2)
    return {"scenario": name, "framework": framework, "world": [world1, world2], "ok": all(checks.values()),
            "checks": checks, "checkpoint": ckpt, "checkpoint_files": files, "saved_state": saved,
            "batches_per_optimizer_step": ga,
            "phase1_yielded_per_rank": [p["yielded"] for p in phase1],
            "phase1_trained_per_rank": [len(t) for t in trained1],
            "phase1": [[(b["global_step"], b["samples"]) for b in t] for t in trained1],
            "phase2": [[(b["global_step"], b["samples"]) for b in t] for t in trained2],
            "phase2_global_step": [p["global_step"] for p in phase2],
            "first_batch_shapes": trained1[0][0]["shapes"],
            "trainer_added": phase1[0].get("keywords_the_trainer_added"),
            "ignore_data_skip": phase2[0].get("ignore_data_skip"),
            "losses": [[p["losses"] for p in phase1], [p["losses"] for p in phase2]]}


def markdown(report) -> str:
    """The report's summary as Markdown tables (RESULTS.md quotes them)."""
    v = report["versions"]
    out = [f"transformers {v['transformers']}, accelerate {v.get('accelerate')}, lightning {v.get('lightning')}, "
           f"torch {v['torch']}, numpy {v.get('numpy')}, Python {v['python']}"]
    if any(not r.get("control") for r in report["runs"]):
        out += ["", "| scenario | checks | phase 1: batches yielded / trained on, per rank | saved (epoch, position, "
                "next_step) | phase 2: first step per rank | seconds |", "|---|---|---|---|---|---|"]
    for r in report["runs"]:
        if r.get("control"):
            continue
        s = r["saved_state"]
        passed = sum(r["checks"].values())
        out.append(f"| {r['scenario']} | {passed}/{len(r['checks'])} {'ok' if r['ok'] else 'FAILED'} | "
                   f"{' · '.join(f'{y}/{t}' for y, t in zip(r['phase1_yielded_per_rank'], r['phase1_trained_per_rank']))} | "
                   f"({s['epoch']}, {s['position']}, {s['next_step']}) | "
                   f"{' · '.join(str(p[0][0]) for p in r['phase2'])} | {r['seconds']} |")
    for r in report["runs"]:
        if r.get("control"):
            for rank in r["ranks"]:
                got = rank.get("model_got") or []
                out.append(f"\n{r['scenario']} rank {rank.get('rank')}: read {rank.get('batches_this_rank_read')} "
                           f"batches; {rank.get('error') or rank.get('failed')}"
                           + (f"; the model got {got[0]}" if got else ""))
    return "\n".join(out)


SCENARIOS = {"hf-1to1": ("hf", 1, 1), "lightning-1to1": ("lightning", 1, 1),
             "hf-2to1": ("hf", 2, 1), "lightning-2to1": ("lightning", 2, 1)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stoker-home", required=True, help="a Stoker checkout with a built stoker-cli (target/)")
    ap.add_argument("--java", default="/usr/lib/jvm/temurin-25-jdk-amd64/bin/java")
    ap.add_argument("--work", default="/tmp/glue-check")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"comma-separated, of {', '.join(SCENARIOS)} (framework, world of phase 1 to world of "
                         f"phase 2; default: these) and hf-stock-1, hf-stock-2 (the control: the stock Trainer "
                         f"on TorchIterableDataset at world 1 or 2)")
    ap.add_argument("--steps-first", type=int, default=3, help="optimizer steps of phase 1 (the checkpoint's step)")
    ap.add_argument("--steps-total", type=int, default=6, help="optimizer steps once phase 2 is done")
    ap.add_argument("--port", type=int, default=29650, help="torchrun's master port (the next free one above)")
    ap.add_argument("--report", help="write the JSON report here (default: WORK/report.json)")
    a = ap.parse_args(argv)
    import transformers
    tv = transformers.__version__
    os.makedirs(a.work, exist_ok=True)
    data = make_dataset(a.stoker_home, os.path.join(a.work, "ds"))
    versions = {"python": platform.python_version(), "torch": torch.__version__, "transformers": tv}
    for mod in ("accelerate", "lightning", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    report = {"versions": versions, "serve": "java … dev.stoker.cli.Main serve " + " ".join(Service.ARGS),
              "runs": []}
    for name in a.scenarios.split(","):
        t0 = time.monotonic()
        if name.startswith("hf-stock-"):
            run = control(a, data, tv, int(name.rsplit("-", 1)[1]))
            print(f"glue-check {name} (control): {json.dumps(run['ranks'], indent=1)}", flush=True)
            report["runs"].append(run)
            continue
        run = scenario(a, data, tv, *SCENARIOS[name])
        run["seconds"] = round(time.monotonic() - t0, 1)
        report["runs"].append(run)
        print(f"glue-check {name}: {'ok' if run['ok'] else 'FAILED'} ({run['seconds']} s)",
              json.dumps(run["checks"], indent=1), flush=True)
    report["ok"] = all(r["ok"] for r in report["runs"])
    print(markdown(report))
    path = a.report or os.path.join(a.work, "report.json")
    with open(path, "w") as f:
        f.write(json.dumps(report, indent=1) + "\n")
    print(f"glue-check: {'ok' if report['ok'] else 'FAILED'}; report in {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
