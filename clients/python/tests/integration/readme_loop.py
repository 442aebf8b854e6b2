"""Integration client for ReadmeLoopTest (stoker-cli): the README's training loop against a real `stoker serve`.

    readme_loop.py --socket S --state-dir DIR [--world W] [--rank R] [--timeout SECONDS] [--max-steps N]

Runs exactly the loop of the README's Python section: ``for step, batch in enumerate(loader):`` with
no ``del``, so the previous ``batch`` is still alive (its lease held) while the loader asks for the
next one; each step touches a tensor (a Linear layer over ``pixel_values``, backward, an optimizer
step) and saves ``loader.state_dict()`` at step 0, as the README does every 1000 steps. A service
whose shared-memory share cannot hold the batch kept and the one being made leaves this loop waiting
for ever (``--timeout`` bounds each socket read: the loader then raises StokerError).

Prints one JSON line on stdout, the last line: {"ok", "steps", "global_steps", "batch_bytes",
"delivery", "step_seconds", "loop_seconds", "distinct_consecutive"} and exits 0 when the feed ended (END), or
{"ok": false, "error", "steps", ...} and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from stoker import Loader, StokerError, is_view_of_segment  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (default: run to END)")
    a = ap.parse_args(argv)

    report = {"ok": False, "steps": 0, "global_steps": [], "batch_bytes": [], "delivery": None, "step_seconds": [],
              "not_views": []}
    pointers = []  # where each batch's input_ids lay: a held batch's memory is never reused for the next
    t0 = last = time.perf_counter()

    model = torch.nn.Linear(1176, 1)                       # stands in for Qwen-VL
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    try:
        with Loader(a.socket, rank=a.rank, world_size=a.world, as_torch=True, timeout=a.timeout) as loader:
            for step, batch in enumerate(loader):              # dict of tensors viewing shared memory
                loss = model(batch["pixel_values"]).mean()     # move to the GPU with .cuda(non_blocking=True)
                loss.backward(); opt.step(); opt.zero_grad()
                if step % 1000 == 0:
                    torch.save(loader.state_dict(), os.path.join(a.state_dir, "loader.pt"))  # exact position
                # bookkeeping (ints only: nothing here keeps the batch alive past the next step)
                now = time.perf_counter()
                report["step_seconds"].append(round(now - last, 4))
                last = now
                report["steps"] = step + 1
                report["global_steps"].append(loader.last_meta.global_step)
                report["batch_bytes"].append(loader.last_meta.total_bytes)
                report["delivery"] = loader.delivery
                pointers.append(batch["input_ids"].data_ptr())
                report["not_views"] += [f"step {step} {k}" for k, t in batch.items() if not is_view_of_segment(t, loader)]
                print(f"step {step}: global step {loader.last_meta.global_step}, {loader.last_meta.samples} samples, "
                      f"{loader.last_meta.total_bytes} bytes, loss {float(loss):.4f}", file=sys.stderr, flush=True)
                if a.max_steps is not None and step + 1 >= a.max_steps:
                    break
    except StokerError as e:
        report["error"] = f"{type(e).__name__}: {e}"
    report["loop_seconds"] = round(time.perf_counter() - t0, 3)
    report["distinct_consecutive"] = all(p != q for p, q in zip(pointers, pointers[1:]))
    report["ok"] = "error" not in report and not report["not_views"] and report["delivery"] == "shared_memory"
    if not report["ok"] and "error" not in report:
        report["error"] = f"delivery {report['delivery']}, not views of the segment: {report['not_views']}"
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
