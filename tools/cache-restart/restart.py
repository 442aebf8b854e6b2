#!/usr/bin/python3
"""The cache of preprocessed samples as a user meets it: the same `stoker serve` command run twice over one epoch,
read to the end by one Python trainer each time; the first run starts with an empty --cache-dir (cold), the second
finds the first one's entries (warm). Says whether every batch of the second run is byte-identical to the first's,
and each run's samples/s.

  /usr/bin/python3 tools/cache-restart/restart.py --data DS/train.jsonl --out RESULT.json [--runs 2] [--batch 4]
      [--max-pixels 451584] [--work DIR] [-- MORE SERVE OPTIONS]

Each run: `./stoker serve --data DS --ranks 1 --batch B --max-pixels P --steps S --cache-dir WORK/cache
--socket ... --metrics-file ...` (S = one epoch: samples / B, rounded down), and the trainer (clients/python
`stoker.Loader`, numpy arrays) asks for the next batch as soon as the socket exists. samples/s = samples / (time
from the first request to the last batch in hand): what the service does before its socket opens (the JVM's start,
the CPU warm-up and the feed's rehearsal, the store's prepared segments) is not in it (`service_start_s`); steady
samples/s leaves out the first 10% of the batches (as `bench ladder`'s steady figures do). The feed starts filling as
soon as it opens, just before the socket is bound: a trainer that connects late finds batches already made (here it
connects at once). `launch_to_last_batch_s`, from the command's launch to the last batch in hand, counts all of it. A
batch's digest is SHA-256 over each tensor's name,
dtype, shape and bytes, in the batch's order. Run with Debian's /usr/bin/python3 (numpy).
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_once(a, extra, label, digest):
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    from stoker import Loader
    sock = os.path.join(a.work, "serve.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    metrics = os.path.join(a.work, f"metrics-{label}.json")
    cmd = [os.path.join(ROOT, "stoker"), "serve", "--data", a.data, "--ranks", "1", "--batch", str(a.batch),
           "--max-pixels", str(a.max_pixels), "--steps", str(a.steps), "--cache-dir", os.path.join(a.work, "cache"),
           "--socket", sock, "--job", "restart", "--metrics-file", metrics] + extra
    log = open(os.path.join(a.work, f"serve-{label}.log"), "w")
    t0 = time.perf_counter()
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    digests, samples, times, sizes = [], 0, [], []
    try:
        while not os.path.exists(sock):
            if srv.poll() is not None:
                raise SystemExit(f"stoker serve exited with {srv.returncode}: see {log.name}")
            if time.perf_counter() - t0 > 300:
                raise SystemExit("stoker serve did not open its socket in 300 s")
            time.sleep(0.01)
        started = time.perf_counter()
        loader = Loader(sock, 0, 1, job="restart", timeout=600, connect_timeout=60)
        t_first = time.perf_counter()
        try:
            for batch in loader:
                samples += len(batch["input_ids"])
                times.append(time.perf_counter())
                sizes.append(len(batch["input_ids"]))
                if not digest:
                    continue
                h = hashlib.sha256()
                for name, v in batch.items():
                    h.update(name.encode())
                    h.update(str(v.dtype).encode())
                    h.update(str(v.shape).encode())
                    h.update(memoryview(v.reshape(-1).view("uint8")))
                digests.append(h.hexdigest())
            t_end = time.perf_counter()
        finally:
            loader.close()
    finally:
        if srv.poll() is None:
            srv.send_signal(signal.SIGTERM)
            try:
                srv.wait(60)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
        log.close()
    skip = max(1, len(times) // 10)  # steady: after the first 10% of the batches (the pipeline's start and first batches)
    steady = sum(sizes[skip:]) / (times[-1] - times[skip - 1]) if len(times) > skip else float("nan")
    rec = {"run": label, "samples": samples, "service_start_s": round(started - t0, 3),
           "epoch_s": round(t_end - t_first, 3), "samples_per_s": round(samples / (t_end - t_first), 2),
           "first_batch_s": round(times[0] - t_first, 3) if times else None, "steady_samples_per_s": round(steady, 2),
           "launch_to_last_batch_s": round(t_end - t0, 3),
           "load_avg": os.getloadavg()[0]}
    try:
        m = json.load(open(metrics))
        rec["cache"] = m.get("cache")
    except (OSError, ValueError):
        pass
    return rec, digests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-pixels", type=int, default=451584)
    ap.add_argument("--work", default=None)
    ap.add_argument("--no-verify", dest="verify", action="store_false", help="skip the byte-identity check's two runs")
    ap.add_argument("extra", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.extra[1:] if a.extra and a.extra[0] == "--" else a.extra
    a.work = a.work or os.path.splitext(a.out)[0] + ".work"
    os.makedirs(a.work, exist_ok=True)
    shutil.rmtree(os.path.join(a.work, "cache"), ignore_errors=True)  # the first run is cold
    with open(a.data) as f:
        n = sum(1 for line in f if line.strip())
    a.steps = n // a.batch
    # the check: a cold run and a warm one whose trainer hashes every batch (hashing ~40 MB a batch costs the trainer
    # more than a warm service takes to make it, so the timed runs that follow do not hash)
    cold = warm = None
    if a.verify:
        cold = run_once(a, extra, "verify-cold", True)[1]
        warm = run_once(a, extra, "verify-warm", True)[1]
        shutil.rmtree(os.path.join(a.work, "cache"), ignore_errors=True)
    runs = []
    for i in range(a.runs):
        rec, _ = run_once(a, extra, "cold" if i == 0 else f"warm{i}", False)
        runs.append(rec)
        print(json.dumps(rec), flush=True)
    cache_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(a.work, "cache")) for f in fs)
    out = {"data": a.data, "samples": n, "batch": a.batch, "max_pixels": a.max_pixels, "runs": runs,
           "verified_batches": len(cold) if cold else 0, "warm_batches_identical_to_cold": (cold == warm) if cold else None,
           "cache_bytes": cache_bytes, "cache_bytes_per_sample": round(cache_bytes / n),
           "warm_over_cold": round(runs[-1]["samples_per_s"] / runs[0]["samples_per_s"], 2) if len(runs) > 1 else None,
           "steady_warm_over_cold": round(runs[-1]["steady_samples_per_s"] / runs[0]["steady_samples_per_s"], 2) if len(runs) > 1 else None,
           "serve_extra": extra}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("samples", "verified_batches", "warm_batches_identical_to_cold", "cache_bytes_per_sample",
                                          "warm_over_cold", "steady_warm_over_cold")}))


if __name__ == "__main__":
    main()
