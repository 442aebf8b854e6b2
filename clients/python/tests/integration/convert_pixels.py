"""The Python client's compact-format conversion run on batches a Java test wrote (PythonPixels, stoker-encode tests).

    convert_pixels.py DIR

DIR holds one folder per batch; each has every tensor of the batch as NAME.npy and ``inputs.txt`` (the model
inputs' names, in order, one a line; the other .npy files are the batch's metadata). Each batch is converted with
``stoker.pixels.batch_to_pixel_values`` on NumPy arrays and, where torch imports, on torch tensors (which must give
the same bits); ``pixel_values.npy`` / ``pixel_values_videos.npy`` are written into the batch's ``converted/``
folder, with ``keys.txt``, the converted batch's keys in order. Prints one JSON line: the batches and whether torch ran.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from stoker.pixels import PIXEL_VALUES, PIXEL_VALUES_VIDEOS, batch_to_pixel_values  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def main(root):
    done = 0
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        with open(os.path.join(folder, "inputs.txt")) as f:
            inputs = [line.strip() for line in f if line.strip()]
        arrays = {n[:-4]: np.load(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".npy")}
        batch = {n: arrays[n] for n in inputs}
        meta = {n: a for n, a in arrays.items() if n not in inputs}
        out = batch_to_pixel_values(batch, meta)
        if torch is not None:
            tout = batch_to_pixel_values({n: torch.from_numpy(a) for n, a in batch.items()}, meta)
            for key in (PIXEL_VALUES, PIXEL_VALUES_VIDEOS):
                if key in out and not np.array_equal(out[key].view(np.uint32), tout[key].numpy().view(np.uint32)):
                    raise SystemExit(f"{name}: torch and NumPy give different {key}")
        converted = os.path.join(folder, "converted")
        os.makedirs(converted, exist_ok=True)
        for key in (PIXEL_VALUES, PIXEL_VALUES_VIDEOS):
            if key in out:
                np.save(os.path.join(converted, key + ".npy"), np.ascontiguousarray(out[key]))
        with open(os.path.join(converted, "keys.txt"), "w") as f:
            f.write("\n".join(out) + "\n")
        done += 1
    print(json.dumps({"batches": done, "torch": torch is not None}))


if __name__ == "__main__":
    main(sys.argv[1])
