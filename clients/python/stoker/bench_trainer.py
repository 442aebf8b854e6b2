"""A simulated trainer rank in Python, for ``stoker bench ladder --trainer python``.

    python3 -m stoker.bench_trainer --socket S --rank R --world W --steps N --step-ms MS --report FILE [--job J] [--copy]
                                    [--to-pixel-values] [--headspace N,M]

Mirrors the Java trainer (``stoker trainer``, TrainerCommand): connects (accepting shared memory
unless ``--copy``), and per step measures the wait (from asking for the next batch until holding
it), then "computes" by sleeping ``--step-ms`` (no CPU, as a GPU step would), then drops the batch
(its lease goes back to the service with the next request). Writes the same JSON report:
``rank, world, connect_wait_ms, elapsed_ms, start_unix_ms, bytes_received, refs_received, shared_memory, steps``,
each step ``[wait_ns, compute_ns, total_bytes, samples, transfer_ns, convert_ns]``; ``transfer_ns``
is the time from the reply's frame header to the batch in hand (the payload's copy through the
socket under copy delivery; mapping and parsing under shared memory). With ``--to-pixel-values`` a
compact batch (``pixel_values_u8``) is turned into ``pixel_values`` by the torch function before the
step, as a trainer would: that is part of the wait, and ``convert_ns``. With ``--headspace N,M`` the
Loader's headspace option keeps copies of the first N batches and replays them for M steps without
asking the service (on top of ``--steps``): those steps are not in ``steps`` but in
``replayed_steps_ns``, and their median is ``compute_floor_ns``, which the Loader reports to the service.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import StokerError
from .loader import Loader


class _TimedLoader(Loader):
    """A Loader that notes when each reply's frame header arrived (as TrainerClient.lastFrameHeaderNanos)."""

    last_frame_header_ns = 0

    def _read_frame_header(self, sock):
        out = super()._read_frame_header(sock)
        self.last_frame_header_ns = time.perf_counter_ns()
        return out


def run(args) -> dict:
    steps = []
    connect_ns = time.perf_counter_ns()
    loader = _TimedLoader(args.socket, args.rank, args.world, job=args.job, shared_memory=not args.copy,
                          as_torch=args.to_pixel_values, to_pixel_values=args.to_pixel_values, headspace=args.headspace)
    try:
        loader.connect()  # the service may hold WELCOME until its pipeline is up
        start = time.perf_counter_ns()
        start_unix_ms = time.time_ns() // 1_000_000
        while len(steps) < args.steps:
            t0 = time.perf_counter_ns()
            replayed = loader.replayed
            try:
                batch = next(loader)
            except StopIteration:
                break
            t1 = time.perf_counter_ns()
            meta = loader.last_meta
            time.sleep(args.step_ms / 1000.0)
            if loader.replayed > replayed:  # a replayed copy: a step of the compute floor, not one on the service's batch
                del batch
                continue
            del batch  # the step is done with the batch: its lease is released with the next request
            t2 = time.perf_counter_ns()
            convert = loader.last_convert_ns
            steps.append([t1 - t0, t2 - t1, meta.total_bytes, meta.samples, max(0, t1 - convert - loader.last_frame_header_ns),
                          convert])
        end = time.perf_counter_ns()
        report = {
            "rank": args.rank,
            "world": args.world,
            "connect_wait_ms": (start - connect_ns) / 1e6,
            "elapsed_ms": (end - start) / 1e6,
            "start_unix_ms": start_unix_ms,
            "bytes_received": loader.bytes_received,
            "refs_received": loader.refs,
            "shared_memory": loader.delivery == "shared_memory",
            "steps": steps,
        }
        if args.headspace:
            report["replayed_steps_ns"] = list(loader.replay_steps_ns)
            report["compute_floor_ns"] = loader.compute_floor_ns
        if args.to_pixel_values:
            import torch
            report["torch_threads"] = torch.get_num_threads()
    finally:
        loader.close()
    return report


def _pair(text: str):
    try:
        n, m = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,M (batches kept, steps replayed), got {text!r}") from None
    return n, m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m stoker.bench_trainer",
                                 description="Simulated trainer rank (started by stoker bench ladder --trainer python).")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--step-ms", type=int, required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--job", default="bench")
    ap.add_argument("--copy", action="store_true", help="Ask for copies even when the service offers shared memory.")
    ap.add_argument("--to-pixel-values", action="store_true",
                    help="Turn a compact batch's pixel_values_u8 into pixel_values (torch) before each step.")
    ap.add_argument("--headspace", type=_pair, metavar="N,M",
                    help="Keep copies of the first N batches and replay them for M steps without asking the service.")
    args = ap.parse_args(argv)
    try:
        report = run(args)
    except StokerError as e:
        print(f"stoker.bench_trainer rank {args.rank}: {e}", file=sys.stderr)
        return 1
    tmp = args.report + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
