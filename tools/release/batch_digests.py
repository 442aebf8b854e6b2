"""Takes every batch of every rank from a running `stoker serve` and prints one JSON line: the client's
version and where it was imported from, and per rank the sha256 of each batch in order.

A batch's digest covers, in the batch's order, each tensor's name, dtype, shape and bytes, then the
batch's sample indices: two services that agree on it handed the trainer the same batches.
Run by check.py with the checkout's client and with the release's wheel installed in a venv.
"""

import argparse
import hashlib
import json
import sys
import threading

import numpy as np

import stoker


def rank_digests(socket_path, rank, world, timeout, out, errors):
    try:
        digests = []
        with stoker.Loader(socket_path, rank, world, timeout=timeout) as loader:
            for batch in loader:
                h = hashlib.sha256()
                for name, array in batch.items():
                    a = np.ascontiguousarray(array)
                    h.update(f"{name} {a.dtype.str} {list(a.shape)}\n".encode())
                    h.update(a.tobytes())
                h.update(np.ascontiguousarray(loader.last_meta.sample_index, dtype=np.int64).tobytes())
                digests.append(h.hexdigest())
        out[rank] = digests
    except BaseException as e:  # reported by the main thread, which fails the run
        errors.append(f"rank {rank}: {type(e).__name__}: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--socket", required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per socket read")
    args = p.parse_args()
    # every rank at once: a service may wait for a slow rank before it makes another's next batch
    out, errors = {}, []
    threads = [threading.Thread(target=rank_digests, args=(args.socket, r, args.world, args.timeout, out, errors))
               for r in range(args.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"version": stoker.__version__, "file": stoker.__file__,
                      "ranks": {str(r): out[r] for r in range(args.world)}}))


if __name__ == "__main__":
    main()
