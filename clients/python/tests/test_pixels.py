"""The compact wire format's conversion (stoker.pixels) against an independent two-pass reference,
and the Loader applying it. The service-side equality (the torch function's output equals the
float32 pixel_values a real `stoker serve` sends) is PythonClientTest's compact test (stoker-cli)."""

import gc
import os
import sys
import unittest
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

from stoker import Loader, normalization_table, read_batch, to_pixel_values, to_pixel_values_numpy  # noqa: E402
from stoker import pixels  # noqa: E402
from fake_service import METADATA, make_batches, write_batch  # noqa: E402
from test_loader import ServiceTest  # noqa: E402

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HALF = [0.5, 0.5, 0.5]


def reference(images, mean, std, p, tps=2, m=2):
    """Two passes as the HF processor does it (spec §6, §7): float32 rescale + normalize of the whole
    image, channel-first, frames duplicated, then HF's reshape/transpose. No table, no gather."""
    mean32 = np.asarray(mean, np.float32).reshape(3, 1, 1)
    std32 = np.asarray(std, np.float32).reshape(3, 1, 1)
    out = []
    for img in images:
        h, w, _ = img.shape
        r = (img.astype(np.float64) * (1.0 / 255.0)).astype(np.float32).transpose(2, 0, 1)  # (C, H, W)
        norm = (r - mean32) / std32
        frames = np.stack([norm] * tps)  # (T, C, H, W)
        gh, gw = h // p, w // p
        x = frames.reshape(1, tps, 3, gh // m, m, p, gw // m, m, p).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
        out.append(x.reshape(gh * gw, 3 * tps * p * p))
    return np.concatenate(out) if out else np.zeros((0, 3 * tps * p * p), np.float32)


def compact(images, p):
    """(pixel_values_u8, image_grid_thw) of ``images`` (H, W, 3 uint8 each)."""
    u8 = np.concatenate([i.reshape(-1, 3) for i in images]) if images else np.zeros((0, 3), np.uint8)
    grid = np.array([[1, i.shape[0] // p, i.shape[1] // p] for i in images], np.int64).reshape(-1, 3)
    return u8, grid


def random_images(sizes, seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    if imgs:
        imgs[0][0, :4] = [[0, 0, 0], [255, 255, 255], [0, 128, 255], [255, 0, 1]]  # both ends of the table
    return imgs


CASES = [  # (patch size, mean, std, image sizes (H, W))
    (14, CLIP_MEAN, CLIP_STD, [(28, 28)]),
    (14, CLIP_MEAN, CLIP_STD, [(504, 728)]),
    (14, CLIP_MEAN, CLIP_STD, [(56, 252), (364, 84)]),       # two images
    (16, HALF, HALF, [(96, 64)]),                              # Qwen3-VL
    (16, HALF, HALF, [(32, 32), (160, 224)]),
]


def bits(a):
    a = a.numpy() if torch is not None and isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


class ConversionTest(unittest.TestCase):
    def test_table_holds_the_service_values(self):
        # the values PatchWriterTest pins for the Java table (spec §15: min/max of the p01 vector)
        t = normalization_table(CLIP_MEAN, CLIP_STD)
        self.assertEqual(t.dtype, np.float32)
        self.assertEqual(float(t[0, 0]), -1.7922625541687012)
        self.assertEqual(float(t[2, 255]), 2.1458969116210938)
        half = normalization_table(HALF, HALF)
        self.assertEqual(float(half[0, 0]), -1.0)
        self.assertEqual(float(half[0, 255]), 1.0)

    def test_numpy_equals_the_two_pass_reference_bit_for_bit(self):
        for i, (p, mean, std, sizes) in enumerate(CASES):
            imgs = random_images(sizes, i)
            u8, grid = compact(imgs, p)
            got = to_pixel_values_numpy(u8, grid, mean, std, patch_size=p)
            self.assertEqual(got.shape, (int((grid[:, 1] * grid[:, 2]).sum()), 6 * p * p), sizes)
            np.testing.assert_array_equal(bits(got), bits(reference(imgs, mean, std, p)), err_msg=str(sizes))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_equals_the_two_pass_reference_bit_for_bit(self):
        for i, (p, mean, std, sizes) in enumerate(CASES):
            imgs = random_images(sizes, 10 + i)
            u8, grid = compact(imgs, p)
            for u8_in, grid_in in ((torch.from_numpy(u8), torch.from_numpy(grid)), (u8, grid.tolist())):
                got = to_pixel_values(u8_in, grid_in, mean, std, patch_size=p)
                self.assertIsInstance(got, torch.Tensor)
                self.assertEqual(got.dtype, torch.float32)
                np.testing.assert_array_equal(bits(got), bits(reference(imgs, mean, std, p)), err_msg=str(sizes))

    def test_a_wrong_byte_count_or_grid_is_refused(self):
        imgs = random_images([(56, 28)], 0)
        u8, grid = compact(imgs, 14)
        with self.assertRaisesRegex(ValueError, "pixel_values_u8 has 1567 pixels, image_grid_thw needs 1568"):
            to_pixel_values_numpy(u8[:-1], grid, CLIP_MEAN, CLIP_STD)
        with self.assertRaisesRegex(ValueError, "t = 1"):
            to_pixel_values_numpy(u8, [[2, 4, 2]], CLIP_MEAN, CLIP_STD)
        with self.assertRaisesRegex(ValueError, "multiples of the merge size"):
            to_pixel_values_numpy(np.zeros((3 * 2 * 196, 3), np.uint8), [[1, 3, 2]], CLIP_MEAN, CLIP_STD)


def compact_batches(count, p=14, seed=0):
    """Batches as a --pixel-format uint8 service sends them, with the float32 pixel_values they stand for."""
    base = make_batches(count, seed=seed)
    out, expected = [], []
    for i, b in enumerate(base):
        imgs = random_images([(2 * p * (1 + i), 4 * p), (4 * p, 2 * p)][: 1 + i % 2], seed + i)
        u8, grid = compact(imgs, p)
        c = {k: v for k, v in b.items() if k not in ("pixel_values", "image_grid_thw")}
        c = {"pixel_values_u8": u8, **c, "image_grid_thw": grid,
             "pixel_norm": np.array([CLIP_MEAN, CLIP_STD], np.float32), "pixel_patch": np.array([p, 2, 2], np.int64)}
        out.append(c)
        expected.append(reference(imgs, CLIP_MEAN, CLIP_STD, p))
    return out, expected


class LoaderConversionTest(ServiceTest):
    def check(self, batch, source, expected_pixels):
        names = [k for k in source if k not in METADATA]
        self.assertEqual(list(batch), ["pixel_values" if k == "pixel_values_u8" else k for k in names], "the model inputs only")
        np.testing.assert_array_equal(bits(batch["pixel_values"]), bits(expected_pixels))
        for k in names:
            if k != "pixel_values_u8":
                got = batch[k].numpy() if torch is not None and isinstance(batch[k], torch.Tensor) else batch[k]
                np.testing.assert_array_equal(got, source[k], err_msg=k)

    def test_numpy_loader_yields_pixel_values_over_copies(self):
        batches, expected = compact_batches(3)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1, to_pixel_values=True) as loader:
            for i in range(3):
                b = next(loader)
                self.assertIsInstance(b["pixel_values"], np.ndarray)
                self.check(b, batches[i], expected[i])
                self.assertGreater(loader.last_convert_ns, 0)

    def test_converted_pixels_reuse_a_buffer_once_dropped(self):
        batches, expected = compact_batches(3)
        batches = [batches[0]] * 3  # one size: each buffer fits the next batch
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1, to_pixel_values=True) as loader:
            b = next(loader)
            first = b["pixel_values"].__array_interface__["data"][0]
            held = b["pixel_values"]
            b2 = next(loader)  # the first is still held: another buffer
            self.assertNotEqual(b2["pixel_values"].__array_interface__["data"][0], first)
            del b, held
            gc.collect()
            b3 = next(loader)
            self.assertEqual(b3["pixel_values"].__array_interface__["data"][0], first, "the dropped batch's buffer is reused")
            np.testing.assert_array_equal(bits(b3["pixel_values"]), bits(expected[0]))
            np.testing.assert_array_equal(bits(b2["pixel_values"]), bits(expected[0]))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_out_buffers_are_filled_in_place(self):
        imgs = random_images([(56, 84), (28, 28)], 3)
        u8, grid = compact(imgs, 14)
        want = reference(imgs, CLIP_MEAN, CLIP_STD, 14)
        buf = torch.full((want.size + 100,), float("nan"))
        got = to_pixel_values(torch.from_numpy(u8), grid, CLIP_MEAN, CLIP_STD, out=buf)
        self.assertEqual(got.data_ptr(), buf.data_ptr())
        np.testing.assert_array_equal(bits(got), bits(want))
        nbuf = np.full(want.size + 7, np.nan, np.float32)
        np.testing.assert_array_equal(bits(to_pixel_values_numpy(u8, grid, CLIP_MEAN, CLIP_STD, out=nbuf)), bits(want))
        with self.assertRaisesRegex(ValueError, "at least"):
            to_pixel_values(torch.from_numpy(u8), grid, CLIP_MEAN, CLIP_STD, out=torch.empty(10))

    def test_without_the_flag_the_batch_is_as_sent(self):
        batches, _ = compact_batches(1)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1) as loader:
            b = next(loader)
            meta = loader.last_meta
        self.assertEqual(list(b), [k for k in batches[0] if k not in METADATA])
        self.assertEqual(b["pixel_values_u8"].dtype, np.uint8)
        np.testing.assert_array_equal(meta.pixel_norm, batches[0]["pixel_norm"])
        np.testing.assert_array_equal(meta.pixel_patch, batches[0]["pixel_patch"])
        np.testing.assert_array_equal(meta.sample_index, batches[0]["sample_index"])

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_loader_converts_from_shared_memory_and_releases_the_lease(self):
        batches, expected = compact_batches(3)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1, as_torch=True, to_pixel_values=True) as loader:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
                b = next(loader)
                self.assertEqual(loader.delivery, "shared_memory")
                self.assertIsInstance(b["pixel_values"], torch.Tensor)
                self.check(b, batches[0], expected[0])
                pv = b.pop("pixel_values")
                del b
                gc.collect()
                next(loader)  # the RELEASE goes with this request: nothing views batch 0's segment any more
            self.assertIn(svc.leases[0], svc.released, "the converted tensor is not a view: the lease went")
            self.assertTrue(pv.is_contiguous() and pv.numel() == expected[0].size)

    def test_a_float32_batch_passes_unchanged(self):
        batches = make_batches(2)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1, to_pixel_values=True) as loader:
            b = next(loader)
        self.assertBatchEqual(b, batches[0])

    def test_pixel_device_needs_torch_and_the_flag(self):
        with self.assertRaisesRegex(ValueError, "pixel_device"):
            Loader("/nonexistent", 0, 1, pixel_device="cpu")

    def test_batch_helper_reads_the_metadata(self):
        batches, expected = compact_batches(2, p=16)
        for b, e in zip(batches, expected):
            inputs, meta = read_batch(write_batch(b))  # the metadata in the BatchMeta, as loader.last_meta has it
            self.assertNotIn("pixel_norm", inputs)
            self.assertEqual(pixels.patch_sizes(meta), (16, 2, 2))
            out = pixels.batch_to_pixel_values(inputs, meta)
            np.testing.assert_array_equal(bits(out["pixel_values"]), bits(e))
            # or a mapping that holds it (a batch read by other means, e.g. from Arrow Flight rows)
            out = pixels.batch_to_pixel_values(inputs, {"pixel_norm": b["pixel_norm"], "pixel_patch": b["pixel_patch"]})
            np.testing.assert_array_equal(bits(out["pixel_values"]), bits(e))
            with self.assertRaisesRegex(ValueError, "pixel_norm"):
                pixels.batch_to_pixel_values(inputs, None)


if __name__ == "__main__":
    unittest.main()
