"""Rows of docs/model-inputs.md §8 that the Python client holds up, against a fake service that flags tensors as the
service does (a batch without images flags its vision inputs as metadata):

* R3: ``mm_token_type_ids`` (transformers 5.3 and later) reaches the dict as a model input, int64 (B, L), right after
  ``position_ids``, unchanged;
* R5: a batch without images hands ``forward`` no ``pixel_values`` and no ``image_grid_thw`` (nor, in the compact
  format, ``pixel_values_u8``, which ``to_pixel_values=True`` then has nothing to convert), over copies and shared
  memory, as NumPy and as torch; the empty tensors stay in ``last_meta.metadata``.

What ``forward`` then does with the dict needs transformers: rows R8-R12, in the separate transformers check.
"""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import Loader, read_batch  # noqa: E402
from fake_service import FakeService, write_batch  # noqa: E402
from test_loader import ServiceTest  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

PAD, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151643, 151652, 151653, 151655, 151656
CLIP = np.array([[0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]], np.float32)


def batch(with_image: bool, compact: bool = False) -> dict:
    """A B=2 batch under the transformers 5.3 contract: sample 0 with one (1, 4, 4) image or none, sample 1 text only."""
    row0 = [10, 11] + ([VISION_START] + [IMAGE_PAD] * 4 + [VISION_END] if with_image else []) + [12, 13]
    row1 = [20, 21, 22]
    length = max(len(row0), len(row1))
    ids = np.full((2, length), PAD, np.int64)
    ids[0, :len(row0)], ids[1, :len(row1)] = row0, row1
    types = np.where(ids == IMAGE_PAD, 1, np.where(ids == VIDEO_PAD, 2, 0)).astype(np.int64)
    grid = np.array([[1, 4, 4]] if with_image else np.zeros((0, 3)), np.int64)
    out = {"input_ids": ids, "labels": np.where(ids == PAD, -100, ids), "attention_mask": (ids != PAD).astype(np.int64),
           "position_ids": np.zeros((3, 2, length), np.int64), "mm_token_type_ids": types}
    rows = 16 if with_image else 0
    if compact:
        out["pixel_values_u8"] = np.full((rows * 14 * 14, 3), 255, np.uint8)
    else:
        out["pixel_values"] = np.ones((rows, 1176), np.float32)
    out["image_grid_thw"] = grid
    out["sample_index"] = np.array([4, 9], np.int64)
    if compact:
        out["pixel_norm"], out["pixel_patch"] = CLIP, np.array([14, 2, 2], np.int64)
    return out


INPUTS = ["input_ids", "labels", "attention_mask", "position_ids", "mm_token_type_ids"]


class ModelInputsTest(ServiceTest):
    def fresh(self, batches, name, **kw):
        """A fake service of its own folder (one socket path per service)."""
        folder = os.path.join(self.tmp, name)
        os.makedirs(folder)
        s = FakeService(folder, batches, **kw)
        self.services.append(s)
        return s

    def as_numpy(self, v):
        return v.numpy() if torch is not None and isinstance(v, torch.Tensor) else v

    def test_R3_mm_token_type_ids_is_a_model_input_after_position_ids(self):
        """R3 (docs/model-inputs.md §8): mm_token_type_ids reaches the dict as sent, int64 (B, L), after position_ids."""
        source = batch(with_image=True)
        for delivery in ("copy", "shm"):
            svc = self.fresh([source], delivery, delivery=delivery)
            with Loader(svc.path, 0, 1) as loader:
                got = next(loader)
                self.assertEqual(list(got), INPUTS + ["pixel_values", "image_grid_thw"], delivery)
                types = got["mm_token_type_ids"]
                self.assertEqual((types.dtype, types.shape), (np.dtype(np.int64), source["input_ids"].shape), delivery)
                np.testing.assert_array_equal(types, source["mm_token_type_ids"])
                self.assertEqual(int((types == 1).sum()), 4, "one per image pad")

    def test_R5_a_batch_without_images_hands_forward_no_vision_inputs(self):
        """R5 (docs/model-inputs.md §8, §4): no pixel_values and no image_grid_thw in the dict of a batch without images,
        over copies and shared memory, NumPy and torch; the empty tensors are the batch's metadata."""
        sources = [batch(with_image=False), batch(with_image=True)]
        for delivery in ("copy", "shm"):
            for as_torch in (False, True) if torch is not None else (False,):
                at = f"{delivery}, as_torch={as_torch}"
                svc = self.fresh(sources, f"{delivery}-{as_torch}", delivery=delivery)
                with Loader(svc.path, 0, 1, as_torch=as_torch) as loader:
                    empty = next(loader)
                    self.assertEqual(list(empty), INPUTS, at + ": the model inputs of a batch without images")
                    meta = loader.last_meta.metadata
                    self.assertEqual(list(meta), ["pixel_values", "image_grid_thw", "sample_index"], at)
                    self.assertEqual(meta["pixel_values"].shape, (0, 1176), at)
                    self.assertEqual(meta["image_grid_thw"].shape, (0, 3), at)
                    np.testing.assert_array_equal(loader.last_meta.sample_index, [4, 9])
                    for k in INPUTS:
                        np.testing.assert_array_equal(self.as_numpy(empty[k]), sources[0][k], err_msg=at + " " + k)
                    full = next(loader)
                    self.assertEqual(list(full), INPUTS + ["pixel_values", "image_grid_thw"], at + ": with an image, all of them")
                    self.assertEqual(list(loader.last_meta.metadata), ["sample_index"], at)
    
    def test_R5_compact_batches_without_images_convert_to_nothing(self):
        """R5 in the compact format: pixel_values_u8 is metadata too, and Loader(to_pixel_values=True) yields the batch
        without pixel_values; the next batch, with an image, is converted as usual."""
        sources = [batch(with_image=False, compact=True), batch(with_image=True, compact=True)]
        for as_torch in (False, True) if torch is not None else (False,):
            svc = self.fresh(sources, f"u8-{as_torch}", delivery="shm")
            with Loader(svc.path, 0, 1, as_torch=as_torch, to_pixel_values=True) as loader:
                empty = next(loader)
                self.assertEqual(list(empty), INPUTS, f"as_torch={as_torch}")
                self.assertEqual(loader.last_convert_ns, 0, "nothing to convert")
                self.assertEqual(list(loader.last_meta.metadata),
                                 ["pixel_values_u8", "image_grid_thw", "sample_index", "pixel_norm", "pixel_patch"])
                full = next(loader)
                self.assertEqual(list(full), INPUTS + ["pixel_values", "image_grid_thw"])
                self.assertEqual(tuple(full["pixel_values"].shape), (16, 1176))

    def test_R5_read_batch_keeps_the_vision_inputs_of_a_batch_without_images_apart(self):
        """R5 for a batch read from bytes (a file, a Flight stream's body): the same split as the Loader's."""
        arrays, meta = read_batch(write_batch(batch(with_image=False)))
        self.assertEqual(list(arrays), INPUTS)
        self.assertEqual(meta.metadata["image_grid_thw"].shape, (0, 3))
        arrays, meta = read_batch(write_batch(batch(with_image=True)))
        self.assertEqual(list(arrays), INPUTS + ["pixel_values", "image_grid_thw"])


if __name__ == "__main__":
    unittest.main()
