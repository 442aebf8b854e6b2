"""Integration client for PythonClientTest (stoker-cli): talks to a real `stoker serve`.

Subcommands (all print one JSON line on stdout, the last line, and exit 0 on success):

  fetch    --socket S --world W --out DIR [--ranks 0,1] [--numpy-steps N] [--torch] [--copy]
           Per rank: a numpy Loader for N batches (all when N is omitted), then (--torch) a
           TorchIterableDataset through a DataLoader for the rest, up to END. Every batch must hold the
           model inputs and nothing else, its sample_index in loader.last_meta. Every tensor of every
           batch is saved as DIR/rank{r}/step{global_step}/{name}.npy, last_meta.sample_index as
           sample_index.npy, the header's fields as meta.json.
           Shared-memory delivery (the default) is checked batch by batch: every array/tensor lies in
           a segment the loader mapped (is_view_of_segment), bytes_copied and bytes_received stay 0.
           --copy asks for copy delivery (shared_memory=False) and checks the opposite.
  hold-and-die --socket S --world W --rank R --hold N
           Takes N batches, keeps them all (N leases held), reports, then SIGKILLs itself.
  take     --socket S --world W --rank R --steps N [--state-in FILE] [--state-out FILE] [--then-die K]
           Loads the state in FILE (when given), takes N batches and reports each one's digest
           (sha256 over the tensors in the batch's order, the model inputs then last_meta's metadata:
           name, shape as "[d0, d1]", bytes; the first 12 bytes in hex, then the sample_index list, as
           ResumeTest computes it in Java); saves
           state_dict() to --state-out. --then-die K: then takes K more batches (trained on after the
           checkpoint), reports, and SIGKILLs itself mid-run: no BYE, its last batches never confirmed.
  compact  --socket U [--copy-socket C] --float-socket F --world W --rank R --steps N [--loader]
           The compact wire format: takes N batches of rank R from F (a float32 service), from U (the
           same job with --pixel-format uint8, shared memory) and from C (the same, copies). Without --loader, turns each u8 batch into pixel_values
           with stoker.pixels.to_pixel_values (torch) and to_pixel_values_numpy, from the batch's own
           metadata pixel_norm/pixel_patch (last_meta); with --loader, a Loader(as_torch=True,
           to_pixel_values=True) does it.
           Either way the float32 bytes must equal F's pixel_values byte for byte (np.array_equal on
           the raw bytes), every other tensor must be equal, and the fingerprints must differ.
           Reports per step the batch bytes of both.
  timed    --socket S --world W --rank R --step-ms MS
           A training loop of Loader.from_env (RANK, WORLD_SIZE and STOKER_SOCKET set from the arguments) that
           sleeps MS per batch, up to END (whose request carries the last step's timing); reports what the
           loader measured itself: timings() as [[wait_ns, step_ns], ...] and wait_ratio().
  expect-error --socket S --world W --rank R [--version V]
           Connects a Loader with those values (its HELLO saying protocol version V when given) and
           expects a StokerError: reports its type and message.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from stoker import Loader, StokerError, is_view_of_segment  # noqa: E402
from stoker import protocol as P  # noqa: E402


def fail(msg: str) -> None:
    print(json.dumps({"ok": False, "error": msg}))
    sys.stdout.flush()
    sys.exit(1)


def meta_json(meta, delivery, loader, api) -> dict:
    return {"epoch": meta.epoch, "step": meta.step, "global_step": meta.global_step, "rank": meta.rank,
            "world": meta.world, "samples": meta.samples, "scheduled": meta.scheduled,
            "total_bytes": meta.total_bytes, "header_bytes": meta.header_bytes, "lease": meta.lease,
            "delivery": delivery, "api": api, "bytes_copied": loader.bytes_copied,
            "bytes_received": loader.bytes_received, "segments": [p for p, _, _ in loader.mapped_segments()]}


def check_and_save(batch: dict, loader: Loader, out: str, rank: int, api: str, shared: bool) -> dict:
    meta = loader.last_meta
    if meta.rank != rank:
        fail(f"rank {rank} got a batch of rank {meta.rank}")
    names = list(batch)
    expected = ["input_ids", "labels", "attention_mask", "position_ids", "pixel_values", "image_grid_thw"]
    if names != expected:
        fail(f"tensor names {names}, expected the model inputs {expected} in that order (the service's one tensor table)")
    index = meta.sample_index
    if not isinstance(index, np.ndarray) or index.dtype != np.int64 or index.shape != (meta.samples,):
        fail(f"last_meta.sample_index is {index!r}, expected int64 ({meta.samples},)")
    if list(meta.metadata) != ["sample_index"]:
        fail(f"metadata {list(meta.metadata)}, expected ['sample_index']")
    where = {}
    for name, t in batch.items():
        a = t.numpy() if api == "torch" else t
        if not isinstance(a, np.ndarray):
            fail(f"{name}: {type(t).__name__} is not an array")
        view = is_view_of_segment(t, loader)
        where[name] = view
        if shared and not view:
            fail(f"rank {rank} step {meta.global_step} ({api}): {name} is not a view of a mapped segment")
        if not shared and view:
            fail(f"rank {rank} step {meta.global_step} ({api}): {name} views a segment under copy delivery")
        if shared and api == "numpy" and a.flags.writeable:
            fail(f"{name}: a shared-memory view must be read-only")
    if loader.bytes_copied != 0:
        fail(f"rank {rank} step {meta.global_step} ({api}): the client copied {loader.bytes_copied} bytes")
    if shared and loader.bytes_received != 0:
        fail(f"rank {rank} ({api}): {loader.bytes_received} bytes crossed the socket under shared-memory delivery")
    d = os.path.join(out, f"rank{rank}", f"step{meta.global_step}")
    if os.path.exists(d):
        fail(f"rank {rank} got global step {meta.global_step} twice")
    os.makedirs(d)
    for name, t in batch.items():
        np.save(os.path.join(d, name + ".npy"), t.numpy() if api == "torch" else t)
    np.save(os.path.join(d, "sample_index.npy"), index)
    m = meta_json(meta, loader.delivery, loader, api)
    m["views_segment"] = where
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(m, f)
    return m


def cmd_fetch(a) -> dict:
    ranks = [int(r) for r in a.ranks.split(",")] if a.ranks else list(range(a.world))
    shared = not a.copy
    report = {"ok": True, "ranks": {}}
    for rank in ranks:
        steps = []
        with Loader(a.socket, rank, a.world, job=a.job, timeout=a.timeout, shared_memory=shared) as loader:
            for batch in loader:
                if loader.delivery != ("shared_memory" if shared else "copy"):
                    fail(f"rank {rank}: delivery {loader.delivery}")
                steps.append(check_and_save(batch, loader, a.out, rank, "numpy", shared)["global_step"])
                del batch
                if a.numpy_steps is not None and len(steps) >= a.numpy_steps:
                    break
            r = {"numpy_steps": list(steps), "refs": loader.refs, "batches": loader.batches,
                 "bytes_received": loader.bytes_received, "bytes_copied": loader.bytes_copied,
                 "segments": sorted({p for p, _, _ in loader.mapped_segments()})}
            numpy_state = loader.state_dict()
        if a.torch:
            import torch
            from torch.utils.data import DataLoader
            from stoker import TorchIterableDataset
            ds = TorchIterableDataset(a.socket, world_size=a.world, rank=rank, job=a.job, timeout=a.timeout,
                                      shared_memory=shared)
            torch_steps = []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
                for batch in DataLoader(ds, batch_size=None, num_workers=0):
                    if not all(isinstance(t, torch.Tensor) for t in batch.values()):
                        fail("TorchIterableDataset yielded something other than tensors")
                    torch_steps.append(check_and_save(batch, ds.loader, a.out, rank, "torch", shared)["global_step"])
                    del batch
            if torch_steps and torch_steps[0] != numpy_state["next_step"]:
                fail(f"rank {rank}: torch continued at step {torch_steps[0]}, numpy state says {numpy_state['next_step']}")
            r["torch_steps"] = torch_steps
            r["torch_refs"] = ds.loader.refs
            r["torch_bytes_received"] = ds.loader.bytes_received
            r["torch_bytes_copied"] = ds.loader.bytes_copied
        report["ranks"][str(rank)] = r
    return report


def cmd_hold_and_die(a) -> None:
    loader = Loader(a.socket, a.rank, a.world, job=a.job, timeout=a.timeout)
    held = []
    for batch in loader:
        held.append((batch, loader.last_meta))
        if len(held) >= a.hold:
            break
    leases = [m.lease for _, m in held]
    print(json.dumps({"ok": True, "held_leases": leases, "steps": [m.global_step for _, m in held],
                      "segments": [p for p, _, _ in loader.mapped_segments()]}))
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # no RELEASE, no BYE: the service must release them itself


def cmd_take(a) -> dict:
    import hashlib
    with Loader(a.socket, a.rank, a.world, job=a.job, timeout=a.timeout) as loader:
        if a.state_in:
            with open(a.state_in) as f:
                loader.load_state_dict(json.load(f))
        digests = []

        def take(n):
            for _ in range(n):
                batch = next(loader)
                meta = loader.last_meta
                md = hashlib.sha256()
                for name, arr in [*batch.items(), *meta.metadata.items()]:  # the layout's order: inputs, then metadata
                    md.update(name.encode("utf-8"))
                    md.update(str(list(arr.shape)).encode("utf-8"))
                    md.update(np.ascontiguousarray(arr).tobytes())
                digests.append(md.digest()[:12].hex() + " " + str([int(i) for i in meta.sample_index]))
                del batch, arr

        take(a.steps)
        state = loader.state_dict()
        if a.state_out:
            with open(a.state_out, "w") as f:
                json.dump(state, f)
        if a.then_die:
            take(a.then_die)
            print(json.dumps({"ok": True, "digests": digests, "state": state}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    return {"ok": True, "digests": digests, "state": state}


def cmd_compact(a) -> dict:
    import torch
    from stoker import pixels

    with Loader(a.float_socket, a.rank, a.world, job=a.job, timeout=a.timeout, copy=True) as f:
        expected = [(next(f), f.last_meta) for _ in range(a.steps)]
        float_fingerprint = f.welcome.fingerprint
    report = {"ok": True}
    for label, sock, shared in (("shared_memory", a.socket, True), ("copy", a.copy_socket, False)):
        if sock:
            report[label] = compare_compact(a, sock, shared, expected, float_fingerprint)
    return report


def compare_compact(a, sock, shared, expected, float_fingerprint) -> dict:
    import torch
    from stoker import pixels

    steps = []
    kw = dict(as_torch=True, to_pixel_values=True) if a.loader else {}
    with Loader(sock, a.rank, a.world, job=a.job, timeout=a.timeout, shared_memory=shared, **kw) as u:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
            for want, want_meta in expected:
                batch = next(u)
                meta = u.last_meta
                if u.delivery != ("shared_memory" if shared else "copy"):
                    fail(f"delivery {u.delivery}")
                if meta.global_step != want_meta.global_step:
                    fail(f"step {meta.global_step} against float32 step {want_meta.global_step}")
                at = f"rank {a.rank} step {meta.global_step}"
                if "pixel_norm" in batch or "pixel_patch" in batch or "sample_index" in batch:
                    fail(f"{at}: metadata among the model inputs: {list(batch)}")
                if meta.pixel_norm is None or meta.pixel_patch is None or list(meta.metadata) != ["sample_index", "pixel_norm", "pixel_patch"]:
                    fail(f"{at}: the compact batch's metadata is {list(meta.metadata)}")
                if not np.array_equal(meta.sample_index, want_meta.sample_index):
                    fail(f"{at}: sample_index {meta.sample_index} against float32 {want_meta.sample_index}")
                if a.loader:
                    if "pixel_values_u8" in batch:
                        fail(f"{at}: the loader left the compact tensors in: {list(batch)}")
                    results = {"loader": batch["pixel_values"].numpy()}
                    u8_bytes = None
                else:
                    if "pixel_values" in batch:
                        fail(f"{at}: a compact batch carries pixel_values")
                    u8 = batch["pixel_values_u8"]
                    if u8.dtype != np.uint8 or u8.ndim != 2 or u8.shape[1] != 3:
                        fail(f"{at}: pixel_values_u8 is {u8.dtype} {u8.shape}")
                    if shared and not is_view_of_segment(u8, u):
                        fail(f"{at}: pixel_values_u8 is not a view of the mapped segment")
                    mean, std = pixels.norm(meta)
                    p, tps, m = pixels.patch_sizes(meta)
                    grid = batch["image_grid_thw"]
                    results = {
                        "torch": pixels.to_pixel_values(torch.from_numpy(u8), torch.from_numpy(grid), mean, std,
                                                        patch_size=p, temporal_patch_size=tps, merge_size=m).numpy(),
                        "numpy": pixels.to_pixel_values_numpy(u8, grid, mean, std, p, tps, m),
                    }
                    u8_bytes = int(u8.nbytes)
                want_pixels = want["pixel_values"]
                for how, got in results.items():
                    if got.dtype != np.float32 or got.shape != want_pixels.shape:
                        fail(f"{at} ({how}): {got.dtype} {got.shape} against float32 {want_pixels.shape}")
                    if not np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want_pixels).view(np.uint8)):
                        bad = np.flatnonzero(got.view(np.uint32) != want_pixels.view(np.uint32))
                        fail(f"{at} ({how}): {bad.size} of {got.size} floats differ from the float32 service's, first at {bad[0]}: "
                             f"{got.reshape(-1)[bad[0]]!r} vs {want_pixels.reshape(-1)[bad[0]]!r}")
                for name, w in want.items():
                    if name == "pixel_values":
                        continue
                    g = batch[name]
                    g = g.numpy() if hasattr(g, "numpy") and not isinstance(g, np.ndarray) else g
                    if not np.array_equal(g, w):
                        fail(f"{at}: {name} differs")
                steps.append({"global_step": meta.global_step, "u8_total_bytes": meta.total_bytes,
                              "float_total_bytes": want_meta.total_bytes, "u8_pixel_bytes": u8_bytes,
                              "float_pixel_bytes": int(want_pixels.nbytes), "images": int(batch["image_grid_thw"].shape[0]),
                              "checked": sorted(results)})
                del batch
        u8_fingerprint = u.welcome.fingerprint
    if u8_fingerprint == float_fingerprint:
        fail(f"the uint8 and float32 jobs have the same fingerprint {u8_fingerprint:x}")
    return {"steps": steps, "bytes_received": u.bytes_received, "refs": u.refs}


def cmd_timed(a) -> dict:
    import time
    os.environ.update(RANK=str(a.rank), WORLD_SIZE=str(a.world), STOKER_SOCKET=a.socket, STOKER_JOB=a.job)
    with Loader.from_env(timeout=a.timeout) as loader:
        batches = 0
        for batch in loader:
            if "input_ids" not in batch:
                fail(f"batch {batches} without input_ids: {list(batch)}")
            del batch
            time.sleep(a.step_ms / 1000.0)  # the trainer's step
            batches += 1
    if len(loader.timings()) != batches:
        fail(f"{batches} batches but {len(loader.timings())} timings")
    return {"ok": True, "batches": batches, "timings": [list(t) for t in loader.timings()],
            "wait_ratio": loader.wait_ratio()}


def cmd_expect_error(a) -> dict:
    if a.version is not None:
        # A client of another protocol version: this client, its HELLO saying version V.
        real_hello = P.hello
        P.hello = lambda *args, **kw: real_hello(*args, **{**kw, "version": a.version})
    try:
        with Loader(a.socket, a.rank, a.world, job=a.job, timeout=a.timeout) as loader:
            next(loader)
    except StokerError as e:
        return {"ok": True, "error_type": type(e).__name__, "message": str(e)}
    fail("the service accepted the client")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("fetch", "hold-and-die", "expect-error", "take", "compact", "timed"):
        p = sub.add_parser(name)
        p.add_argument("--socket", required=True)
        p.add_argument("--world", type=int, required=True)
        p.add_argument("--job", default="default")
        p.add_argument("--timeout", type=float, default=60.0)
        if name == "fetch":
            p.add_argument("--out", required=True)
            p.add_argument("--ranks")
            p.add_argument("--numpy-steps", type=int)
            p.add_argument("--torch", action="store_true")
            p.add_argument("--copy", action="store_true")
        else:
            p.add_argument("--rank", type=int, required=True)
        if name == "hold-and-die":
            p.add_argument("--hold", type=int, default=2)
        if name == "expect-error":
            p.add_argument("--version", type=int)
        if name == "timed":
            p.add_argument("--step-ms", type=int, required=True)
        if name == "compact":
            p.add_argument("--float-socket", required=True)
            p.add_argument("--copy-socket")
            p.add_argument("--steps", type=int, required=True)
            p.add_argument("--loader", action="store_true")
        if name == "take":
            p.add_argument("--steps", type=int, required=True)
            p.add_argument("--state-in")
            p.add_argument("--state-out")
            p.add_argument("--then-die", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "fetch":
        report = cmd_fetch(a)
    elif a.cmd == "hold-and-die":
        cmd_hold_and_die(a)
        return 1  # not reached
    elif a.cmd == "take":
        report = cmd_take(a)
    elif a.cmd == "compact":
        report = cmd_compact(a)
    elif a.cmd == "timed":
        report = cmd_timed(a)
    else:
        report = cmd_expect_error(a)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
