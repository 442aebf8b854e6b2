"""Reads a rank's batches from `stoker serve --flight` with pyarrow, as docs/protocol.md ("Reading a batch with pyarrow")
tells a trainer on another host to, and reports them for a Java test to compare.

usage: flight_take.py --port P --world W --rank R --job J --steps N

Takes N batches of rank R (then expects the end of the feed when --expect-end is given) and prints one JSON line:
{"ok": true, "digests": [...], "tensors": [[name, dtype, shape, metadata], ...]} -- each digest as the Java
BatchDigest computes it (sha256 over every row in the stream's order: name, shape as "[d0, d1]", bytes; the first 12
bytes in hex, then the sample_index list), "tensors" those of the first batch. Needs pyarrow and numpy; the token is the
file `serve` makes for this user on loopback ($XDG_RUNTIME_DIR/stoker/flight.token, else /tmp/stoker-<uid>/flight.token).
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import pyarrow.flight as flight

DTYPES = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "uint8": np.uint8}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--expect-end", action="store_true")
    a = p.parse_args()

    run = os.environ.get("XDG_RUNTIME_DIR")
    path = f"{run}/stoker/flight.token" if run else f"/tmp/stoker-{os.getuid()}/flight.token"
    with open(path) as f:
        token = f.read().strip()
    client = flight.FlightClient(f"grpc://127.0.0.1:{a.port}")
    ticket = flight.Ticket(json.dumps({"rank": a.rank, "world": a.world, "job": a.job}).encode())
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])

    digests, tensors = [], None
    for step in range(a.steps + (1 if a.expect_end else 0)):
        table = client.do_get(ticket, options).read_all()
        meta = table.schema.metadata or {}
        if meta.get(b"stoker.end") == b"true":
            if step < a.steps:
                raise SystemExit(f"the feed ended after {step} of {a.steps} batches")
            break
        if step == a.steps:
            raise SystemExit("no end of the feed after --steps batches")
        md = hashlib.sha256()
        rows, sample_index = [], None
        for i in range(table.num_rows):
            name, dtype = table["name"][i].as_py(), table["dtype"][i].as_py()
            shape = table["shape"][i].as_py()
            array = np.frombuffer(table["data"][i].as_buffer(), dtype=DTYPES[dtype]).reshape(shape)
            md.update(name.encode("utf-8"))
            md.update(str(list(shape)).encode("utf-8"))
            md.update(array.tobytes())
            rows.append([name, dtype, shape, table["metadata"][i].as_py()])
            if name == "sample_index":
                sample_index = [int(x) for x in array]
        digests.append(md.digest()[:12].hex() + " " + str(sample_index))
        if tensors is None:
            tensors = rows
    print(json.dumps({"ok": True, "digests": digests, "tensors": tensors}))


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        if e.code not in (None, 0):
            print(json.dumps({"ok": False, "error": str(e.code)}))
        raise
    sys.stdout.flush()
