"""The compact wire format's video conversion (stoker.pixels.to_pixel_values_videos and its NumPy twin) against
an independent reference: ``normalize_fused`` + ``patchify_video`` of shared/reference/ref_qwenvl_video.py ported
here (float32 arithmetic on the whole clip, the last frame repeated, Hugging Face's view and permute; no table, no
gather), which matches transformers 5.18.0 / 4.57.6 Qwen2VLVideoProcessor and Qwen3VLVideoProcessor bit for bit.
That the Python conversion equals the float32 ``pixel_values_videos`` the Java service writes is
CompactVideoFeedTest's (stoker-pipeline), which runs this module's functions on the feed's batches."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

from stoker import (Loader, batch_to_pixel_values, fused_normalization_table, normalization_table,  # noqa: E402
                    to_pixel_values_videos, to_pixel_values_videos_numpy)
from fake_service import METADATA, make_batches  # noqa: E402
from test_loader import ServiceTest  # noqa: E402
from test_pixels import CLIP_MEAN, CLIP_STD, HALF, bits, compact, random_images, reference  # noqa: E402

F32 = np.float32


def reference_video(frames, mean, std, p, tps=2, m=2):
    """ref_qwenvl_video.py's normalize_fused then patchify_video of one clip (T, H, W, 3) uint8."""
    x = frames.transpose(0, 3, 1, 2)  # (T, C, H, W)
    mm = (np.array(mean, F32) * F32(255.0)).astype(F32).reshape(1, 3, 1, 1)
    ss = (np.array(std, F32) * F32(255.0)).astype(F32).reshape(1, 3, 1, 1)
    x = ((x.astype(F32) - mm) / ss).astype(F32)
    t = x.shape[0]
    pad = -t % tps
    if pad:
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)], axis=0)
        t += pad
    _, c, h, w = x.shape
    gt, gh, gw = t // tps, h // p, w // p
    y = x.reshape(gt, tps, c, gh // m, m, p, gw // m, m, p).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(y.reshape(gt * gh * gw, c * tps * p * p))


def clips(shapes, seed):
    """Random clips of (T, H, W) each, uint8, with both ends of the table in the first."""
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8) for t, h, w in shapes]
    out[0][0, 0, :4] = [[0, 0, 0], [255, 255, 255], [0, 128, 255], [255, 0, 1]]
    return out


def compact_videos(videos, p, tps=2):
    """(pixel_values_videos_u8, video_grid_thw, video_frame_counts) of ``videos``, as the service sends them."""
    u8 = np.concatenate([v.reshape(-1, 3) for v in videos])
    grid = np.array([[-(-v.shape[0] // tps), v.shape[1] // p, v.shape[2] // p] for v in videos], np.int64)
    counts = np.array([v.shape[0] for v in videos], np.int64)
    return u8, grid, counts


CASES = [  # (patch size, mean, std, clips (T, H, W))
    (14, CLIP_MEAN, CLIP_STD, [(4, 28, 56)]),                  # Qwen2/2.5-VL, even T
    (14, CLIP_MEAN, CLIP_STD, [(5, 56, 28)]),                  # odd T: the last frame repeated
    (14, CLIP_MEAN, CLIP_STD, [(1, 28, 28)]),                  # one frame
    (14, CLIP_MEAN, CLIP_STD, [(3, 84, 56), (2, 28, 112), (6, 56, 56)]),  # three videos
    (16, HALF, HALF, [(7, 64, 32)]),                           # Qwen3-VL: odd T is common (no rounding to even)
    (16, HALF, HALF, [(4, 32, 96), (9, 64, 64)]),
]


def expected(videos, mean, std, p):
    return np.concatenate([reference_video(v, mean, std, p) for v in videos])


class VideoConversionTest(unittest.TestCase):
    def test_the_fused_table_is_the_video_processors_not_the_pil_one(self):
        fused = fused_normalization_table(CLIP_MEAN, CLIP_STD)
        self.assertEqual(fused.dtype, np.float32)
        v = np.arange(256, dtype=F32)
        for c in range(3):  # the formula, elementwise in float32
            m = F32(F32(CLIP_MEAN[c]) * F32(255.0))
            s = F32(F32(CLIP_STD[c]) * F32(255.0))
            np.testing.assert_array_equal(bits(fused[c]), bits((v - m) / s))
        self.assertFalse(np.array_equal(bits(fused), bits(normalization_table(CLIP_MEAN, CLIP_STD))),
                         "the fused and the PIL tables differ in some last bits, so a mix-up shows")
        self.assertEqual(float(fused_normalization_table(HALF, HALF)[0, 0]), -1.0)

    def test_numpy_equals_the_reference_bit_for_bit(self):
        for i, (p, mean, std, shapes) in enumerate(CASES):
            videos = clips(shapes, i)
            u8, grid, counts = compact_videos(videos, p)
            got = to_pixel_values_videos_numpy(u8, grid, counts, mean, std, patch_size=p)
            self.assertEqual(got.shape, (int(grid.prod(axis=1).sum()), 6 * p * p), shapes)
            np.testing.assert_array_equal(bits(got), bits(expected(videos, mean, std, p)), err_msg=str(shapes))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_equals_the_reference_bit_for_bit(self):
        for i, (p, mean, std, shapes) in enumerate(CASES):
            videos = clips(shapes, 20 + i)
            u8, grid, counts = compact_videos(videos, p)
            want = expected(videos, mean, std, p)
            for args in ((torch.from_numpy(u8), torch.from_numpy(grid), torch.from_numpy(counts)),
                         (u8, grid.tolist(), counts.tolist())):
                got = to_pixel_values_videos(*args, mean, std, patch_size=p)
                self.assertIsInstance(got, torch.Tensor)
                self.assertEqual(got.dtype, torch.float32)
                np.testing.assert_array_equal(bits(got), bits(want), err_msg=str(shapes))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_out_buffers_are_filled_in_place(self):
        videos = clips([(3, 56, 28), (2, 28, 28)], 5)
        u8, grid, counts = compact_videos(videos, 14)
        want = expected(videos, CLIP_MEAN, CLIP_STD, 14)
        buf = torch.full((want.size + 50,), float("nan"))
        got = to_pixel_values_videos(torch.from_numpy(u8), grid, counts, CLIP_MEAN, CLIP_STD, out=buf)
        self.assertEqual(got.data_ptr(), buf.data_ptr())
        np.testing.assert_array_equal(bits(got), bits(want))
        nbuf = np.full(want.size + 3, np.nan, np.float32)
        np.testing.assert_array_equal(bits(to_pixel_values_videos_numpy(u8, grid, counts, CLIP_MEAN, CLIP_STD, out=nbuf)),
                                      bits(want))

    def test_frame_counts_that_do_not_fit_the_grid_or_the_bytes_are_refused(self):
        videos = clips([(3, 28, 28)], 0)
        u8, grid, counts = compact_videos(videos, 14)
        with self.assertRaisesRegex(ValueError, "video 0 has 5 frames, its grid t = 2 needs 3 to 4"):
            to_pixel_values_videos_numpy(u8, grid, [5], CLIP_MEAN, CLIP_STD)
        with self.assertRaisesRegex(ValueError, "1 video_frame_counts for 2 video_grid_thw rows"):
            to_pixel_values_videos_numpy(u8, [[2, 2, 2], [1, 2, 2]], [3], CLIP_MEAN, CLIP_STD)
        with self.assertRaisesRegex(ValueError, "pixel_values_videos_u8 has 2351 pixels, video_grid_thw and "
                                                "video_frame_counts need 2352"):
            to_pixel_values_videos_numpy(u8[:-1], grid, counts, CLIP_MEAN, CLIP_STD)
        with self.assertRaisesRegex(ValueError, "video_frame_counts \\(metadata\\), which is missing"):
            to_pixel_values_videos_numpy(u8, grid, None, CLIP_MEAN, CLIP_STD)

    def test_batch_to_pixel_values_converts_images_and_videos(self):
        imgs = random_images([(56, 28)], 1)
        iu8, igrid = compact(imgs, 14)
        videos = clips([(5, 28, 56), (2, 56, 28)], 2)
        vu8, vgrid, counts = compact_videos(videos, 14)
        batch = {"input_ids": np.arange(6).reshape(1, 6), "pixel_values_u8": iu8, "image_grid_thw": igrid,
                 "pixel_values_videos_u8": vu8, "video_grid_thw": vgrid, "second_per_grid_ts": np.ones(2, F32)}
        meta = {"pixel_norm": np.array([CLIP_MEAN, CLIP_STD], F32), "pixel_patch": np.array([14, 2, 2]),
                "video_frame_counts": counts}
        want_v = expected(videos, CLIP_MEAN, CLIP_STD, 14)
        want_i = reference(imgs, CLIP_MEAN, CLIP_STD, 14)
        out = batch_to_pixel_values(batch, meta)
        self.assertEqual(list(out), ["input_ids", "pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                                     "second_per_grid_ts"])
        np.testing.assert_array_equal(bits(out["pixel_values"]), bits(want_i))
        np.testing.assert_array_equal(bits(out["pixel_values_videos"]), bits(want_v))
        # a batch with videos and no image: its image tensors are metadata, so not in the dict
        only = {k: v for k, v in batch.items() if k not in ("pixel_values_u8", "image_grid_thw")}
        self.assertEqual(list(batch_to_pixel_values(only, meta)),
                         ["input_ids", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts"])
        if torch is not None:
            tb = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
            tout = batch_to_pixel_values(tb, meta)
            np.testing.assert_array_equal(bits(tout["pixel_values_videos"]), bits(want_v))
            np.testing.assert_array_equal(bits(tout["pixel_values"]), bits(want_i))


def video_batches(count, p=14, seed=0):
    """Compact batches with videos as a --pixel-format uint8 service sends them (the counts as metadata), with the
    pixel_values_videos they stand for."""
    out, want = [], []
    for i, b in enumerate(make_batches(count, seed=seed)):
        videos = clips([(3 + i, 28 * (1 + i % 2), 56)], seed + i)
        u8, grid, counts = compact_videos(videos, p)
        c = {k: v for k, v in b.items() if k not in ("pixel_values", "image_grid_thw")}
        c.update({"pixel_values_videos_u8": u8, "video_grid_thw": grid, "pixel_norm": np.array([CLIP_MEAN, CLIP_STD], F32),
                  "pixel_patch": np.array([p, 2, 2], np.int64), "video_frame_counts": counts})
        out.append(c)
        want.append(expected(videos, CLIP_MEAN, CLIP_STD, p))
    return out, want


class LoaderVideoConversionTest(ServiceTest):
    def test_the_loader_yields_pixel_values_videos(self):
        batches, want = video_batches(2)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1, to_pixel_values=True) as loader:
            for i in range(2):
                b = next(loader)
                self.assertNotIn("pixel_values_videos_u8", b)
                self.assertNotIn("video_frame_counts", b, "metadata, not a model input")
                np.testing.assert_array_equal(loader.last_meta.metadata["video_frame_counts"], batches[i]["video_frame_counts"])
                np.testing.assert_array_equal(bits(b["pixel_values_videos"]), bits(want[i]))
                np.testing.assert_array_equal(b["video_grid_thw"], batches[i]["video_grid_thw"])


if __name__ == "__main__":
    unittest.main()
