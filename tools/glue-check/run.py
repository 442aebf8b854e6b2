"""Glue check: trains a tiny random-init Qwen2-VL for a few steps with Stoker's Hugging Face Trainer glue and
its Lightning glue against a real ``stoker serve``, checkpoints, restarts the service, resumes, and checks that
the resumed run continues at the saved cursor (tools/glue-check/RESULTS.md has what ran and what came out).

    <venv>/bin/python tools/glue-check/run.py --stoker-home /work/main --work /tmp/glue-check [--only hf|lightning]

Needs a venv with torch, transformers (4.57 or 5.x), accelerate and lightning; the client is taken from this
checkout (clients/python). ``--stoker-home``: a checkout whose stoker-cli/target holds a built CLI
(``stoker-cli.jar`` and ``lib/``); the service runs as ``java … dev.stoker.cli.Main serve`` on JDK 25
(``--java``), as ``./stoker`` runs it, without the launcher's rebuild check.

Per framework, three runs against a fresh service each (a restarted trainer needs a restarted service:
the service moves to a resuming trainer's cursor only before it has welcomed any):

1. reference: a plain Loader reads the batches of the whole run (no training), for the expected order;
2. phase 1: the glue trains K steps, checkpointing at step K; the run ends;
3. phase 2: a new model and trainer resume from that checkpoint and train to N steps.

Checks: the batches trained on in phase 1 then phase 2 are the reference's, in order, none lost or repeated
(by the service's global step and the samples' data set indexes); the checkpoint's stoker_loader.json (or
Lightning's data module entry) holds the cursor after the last batch trained on; phase 2's first batch is
the one at that cursor; every batch went to the model as the service made it (no added dimension, no
re-batching). Prints a JSON report and exits 1 when a check fails.
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
import time

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

    def __init__(self, a, data: str, work: str, name: str, transformers_version: str):
        self.socket = os.path.join(work, f"{name}.sock")
        shm = os.path.join(work, "shm")
        os.makedirs(shm, exist_ok=True)
        home = a.stoker_home
        self.cmd = [a.java, *JVM_FLAGS, f"-Dstoker.home={home}", "-cp",
                    f"{home}/stoker-cli/target/stoker-cli.jar:{home}/stoker-cli/target/lib/*", "dev.stoker.cli.Main",
                    "serve", "--job", JOB, "--data", data, "--processor", "qwen2-vl", "--max-pixels", "12544",
                    "--max-seq-len", "256", "--max-images", "1", "--ranks", "1", "--batch", str(BATCH),
                    "--socket", self.socket, "--shm-dir", shm, "--shm-budget", "128M", "--threads", "2",
                    "--transformers", transformers_version]
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


def reference(a, data, work, tv, batches: int) -> list:
    svc = Service(a, data, work, "reference", tv)
    try:
        out = []
        with Loader(svc.socket, 0, 1, job=JOB, as_torch=True, timeout=60) as loader:
            for batch in loader:
                out.append(record(loader.last_meta, batch))
                if len(out) == batches:
                    break
        return out
    finally:
        svc.stop()


# ---------------------------------------------------------------------- Hugging Face Trainer

def run_hf(a, data, work, tv) -> dict:
    from transformers import TrainerCallback, TrainingArguments
    from stoker.integrations.hf import StokerTrainer

    k, n, ga = a.steps_first, a.steps_total, 2
    expected = reference(a, data, work, tv, n * ga)
    out_dir = os.path.join(work, "hf-out")
    shutil.rmtree(out_dir, ignore_errors=True)
    seen_by_model, added = [], set()

    class Recorder(TrainerCallback):
        """After each micro-step the dataset's consumed_meta is the batch just trained on."""

        def __init__(self, ds, log):
            self.ds, self.log = ds, log

        def on_substep_end(self, args, state, control, **kw):
            self.log.append(record(self.ds.consumed_meta, seen_by_model[-1]))

        on_step_end = on_substep_end

    class Model(torch.nn.Module):
        """The tiny Qwen2-VL, remembering each batch's shapes as forward got them."""

        def __init__(self, seed):
            super().__init__()
            self.inner = tiny_qwen2_vl(seed)

        def forward(self, **batch):
            # the Trainer adds num_items_in_batch (its loss normalization) to the batch's own keywords
            seen_by_model.append({k: v for k, v in batch.items() if k != "num_items_in_batch"})
            added.update(k for k in batch if k == "num_items_in_batch")
            return self.inner(**batch)

    def trainer(max_steps, log):
        ds = StokerDataset.from_socket(svc.socket, rank=0, world_size=1, job=JOB, timeout=60)
        args = TrainingArguments(output_dir=out_dir, max_steps=max_steps, per_device_train_batch_size=1,
                                 gradient_accumulation_steps=ga, learning_rate=1e-3, save_strategy="steps",
                                 save_steps=k, logging_steps=1, report_to=[], use_cpu=True, dataloader_num_workers=0,
                                 seed=0, disable_tqdm=True)
        t = StokerTrainer(model=Model(0), args=args, train_dataset=ds)
        t.add_callback(Recorder(ds, log))
        return t, ds

    phase1, phase2 = [], []
    svc = Service(a, data, work, "hf-phase1", tv)
    try:
        t1, ds1 = trainer(k, phase1)
        t1.train()
        yielded1 = ds1.loader.batches
    finally:
        svc.stop()
    ckpt = os.path.join(out_dir, f"checkpoint-{k}")
    saved = read_state(ckpt)
    svc = Service(a, data, work, "hf-phase2", tv)
    try:
        t2, ds2 = trainer(n, phase2)
        loaded = {}
        orig = ds2.load_state_dict
        ds2.load_state_dict = lambda s: (loaded.setdefault("state", s), orig(s))[1]
        t2.train(resume_from_checkpoint=True)
    finally:
        svc.stop()
    return verdict("hf", expected, phase1, phase2, saved, loaded.get("state"), yielded1, k * ga, {
        "checkpoint": ckpt, "files": sorted(os.listdir(ckpt)), "gradient_accumulation_steps": ga,
        "ignore_data_skip": t2.args.ignore_data_skip, "global_step_after_resume": t2.state.global_step,
        "keywords_the_trainer_added": sorted(added),
        "phase1_losses": [h["loss"] for h in t1.state.log_history if "loss" in h],
        "phase2_losses": [h["loss"] for h in t2.state.log_history if "loss" in h]})


# ---------------------------------------------------------------------- Lightning

def run_lightning(a, data, work, tv) -> dict:
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.callbacks import ModelCheckpoint
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.callbacks import ModelCheckpoint
    from stoker.integrations.lightning import StokerDataModule

    k, n = a.steps_first, a.steps_total
    expected = reference(a, data, work, tv, n)
    ckpt_dir = os.path.join(work, "lightning-ckpt")
    shutil.rmtree(ckpt_dir, ignore_errors=True)

    class Module(pl.LightningModule):
        def __init__(self, log):
            super().__init__()
            self.model = tiny_qwen2_vl(0)
            self.log_ = log

        def training_step(self, batch, batch_idx):
            dm = self.trainer.datamodule
            self.log_.append(record(dm.dataset.consumed_meta, batch))
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    loaded = {}

    def fit(max_steps, log, ckpt_path=None):
        dm = StokerDataModule(StokerDataset.from_socket(svc.socket, rank=0, world_size=1, job=JOB, timeout=60))
        orig = dm.dataset.load_state_dict
        dm.dataset.load_state_dict = lambda s: (loaded.setdefault("state", s), orig(s))[1]
        trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, use_distributed_sampler=False,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0, callbacks=[ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=k,
                                                                                save_top_k=-1)])
        trainer.fit(Module(log), datamodule=dm, ckpt_path=ckpt_path)
        return trainer, dm

    phase1, phase2 = [], []
    svc = Service(a, data, work, "lightning-phase1", tv)
    try:
        _, dm1 = fit(k, phase1)
        yielded1 = dm1.dataset.loader.batches
    finally:
        svc.stop()
    files = sorted(os.listdir(ckpt_dir))
    ckpt = os.path.join(ckpt_dir, files[0])
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)["StokerDataModule"]["stoker_loader"]
    svc = Service(a, data, work, "lightning-phase2", tv)
    try:
        trainer2, dm2 = fit(n, phase2, ckpt_path=ckpt)
    finally:
        svc.stop()
    return verdict("lightning", expected, phase1, phase2, saved, loaded.get("state"), yielded1, k, {
        "checkpoint": ckpt, "files": files, "global_step_after_resume": trainer2.global_step})


def verdict(name, expected, phase1, phase2, saved, loaded, yielded1, consumed1, extra) -> dict:
    checks = {}
    got = phase1 + phase2
    checks["phase 1 trained on the reference's first batches, in order"] = \
        [b["samples"] for b in phase1] == [b["samples"] for b in expected[:len(phase1)]]
    checks["phase 1 trained on as many batches as its steps take"] = len(phase1) == consumed1
    checks["the saved cursor is the one after the last batch trained on"] = (
        saved is not None and saved["next_step"] == phase1[-1]["global_step"] + 1
        and saved["position"] == (phase1[-1]["global_step"] + 1) * BATCH % SAMPLES)
    checks["the resume loaded the checkpoint's state"] = loaded == saved
    checks["phase 2's first batch is the one at the saved cursor"] = bool(phase2) and \
        phase2[0]["global_step"] == saved["next_step"]
    checks["phase 1 + phase 2 = the reference: nothing lost or repeated"] = \
        [(b["global_step"], b["samples"]) for b in got] == [(b["global_step"], b["samples"]) for b in expected]
    checks["each batch reached the model as the service made it (names, shapes, sums)"] = \
        [(b["shapes"], b["sums"]) for b in got] == [(b["shapes"], b["sums"]) for b in expected]
    return {"framework": name, "ok": all(checks.values()), "checks": checks,
            "phase1_batches_yielded_by_the_loader": yielded1, "phase1_batches_trained_on": len(phase1),
            "saved_state": saved, "reference": [(b["global_step"], b["samples"]) for b in expected],
            "phase1": [(b["global_step"], b["samples"]) for b in phase1],
            "phase2": [(b["global_step"], b["samples"]) for b in phase2],
            "first_batch_shapes": got[0]["shapes"] if got else None, **extra}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stoker-home", required=True, help="a Stoker checkout with a built stoker-cli (target/)")
    ap.add_argument("--java", default="/usr/lib/jvm/temurin-25-jdk-amd64/bin/java")
    ap.add_argument("--work", default="/tmp/glue-check")
    ap.add_argument("--only", choices=["hf", "lightning"])
    ap.add_argument("--steps-first", type=int, default=3, help="steps of phase 1 (the checkpoint's step)")
    ap.add_argument("--steps-total", type=int, default=6, help="steps after phase 2")
    ap.add_argument("--report", help="write the JSON report here (default: WORK/report.json); the frameworks "
                                     "print their own logs on stdout")
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
    report = {"versions": versions, "runs": []}
    if a.only in (None, "hf"):
        report["runs"].append(run_hf(a, data, a.work, tv))
    if a.only in (None, "lightning"):
        report["runs"].append(run_lightning(a, data, a.work, tv))
    report["ok"] = all(r["ok"] for r in report["runs"])
    path = a.report or os.path.join(a.work, "report.json")
    with open(path, "w") as f:
        f.write(json.dumps(report, indent=1) + "\n")
    for r in report["runs"]:
        print(f"glue-check {r['framework']}: {'ok' if r['ok'] else 'FAILED'}", json.dumps(r["checks"], indent=1))
    print(f"glue-check: {'ok' if report['ok'] else 'FAILED'}; report in {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
