"""The pack adapters of ``stoker.packing`` against references written from each project's rules in
shared/docs/packing-and-video.md §3, independently of the implementation (per-token and per-pair loops,
not its vectorized code):

* HF FA2 (§3.6): the detector ``cat(nonzero(row0 == 0), [T])`` gives the adapter's ``cu_seq_lens``;
* HF sdpa/eager (§3.6): ``find_packed_sequence_indices(row0) = cumsum(diff(row0, prepend=row0[:1] - 1) != 1)``
  separates exactly the segments; the 4-D mask is LLaMA-Factory's ``allowed(q, k)`` (§3.2) per (q, k);
* qwen-vl-finetune (§3.1): ``attention_mask`` = cumsum([0] + lengths), positions = rows 1-3;
* Megatron THD (§3.5, §3.7): labels shifted per sample, padded rows as Megatron-Bridge lays them out;
* padded equivalence on the CPU: a tiny single-head attention over each sample alone equals the packed run under
  the sdpa mask (and under the FA2 boundaries), token by token;
* views: what the doc says is a view shares the batch's (or the metadata's) memory, also through an STKB batch.

The packs are built here by concatenating made-up samples in loops (the test's own model of the service).
"""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import BatchMeta, read_batch  # noqa: E402
from stoker.packing import (PackInfo, check_pack, for_hf_flash_attention, for_hf_sdpa, for_megatron_thd,  # noqa: E402
                            for_qwen_vl_finetune, pack_info)
from fake_service import METADATA, write_batch  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

PAD = 151643
ROW = 12  # a short pixel row: the adapters never look inside it
ADAPTERS = (for_hf_flash_attention, for_hf_sdpa, for_qwen_vl_finetune, for_megatron_thd)


def make_sample(rng, length=None):
    """A made-up sample: ids, labels (first -100), a (3, L) M-RoPE starting at 0, token types, 0-2 images."""
    L = int(rng.integers(1, 51)) if length is None else length
    ids = [int(v) for v in rng.integers(0, 1000, L)]
    labels = [v if rng.random() < 0.7 else -100 for v in ids]
    labels[0] = -100
    mrope = [[0] + [int(v) for v in rng.integers(0, L + 5, L - 1)] for _ in range(3)]
    types = [int(v) for v in rng.integers(0, 2, L)]
    grids = [[1, int(rng.choice([2, 4])), int(rng.choice([2, 4]))] for _ in range(int(rng.integers(0, 3)))]
    pixels = [rng.standard_normal((g[1] * g[2], ROW)).astype(np.float32) for g in grids]
    return {"ids": ids, "labels": labels, "mrope": mrope, "types": types, "grids": grids, "pixels": pixels}


def make_pack(samples, pad_to=1, indices=None):
    """(inputs, metadata) of the canonical pack of ``samples``, built token by token."""
    ids, labels, rows, types, seg, pixels, grids = [], [], [[], [], [], []], [], [], [], []
    for i, s in enumerate(samples):
        L = len(s["ids"])
        ids += s["ids"]
        labels += s["labels"]
        rows[0] += list(range(L))
        for r in range(3):
            rows[r + 1] += s["mrope"][r]
        types += s["types"]
        seg += [i + 1] * L
        pixels += s["pixels"]
        grids += s["grids"]
    p = (-len(ids)) % pad_to
    ids += [PAD] * p
    labels += [-100] * p
    for r in range(4):
        rows[r] += list(range(p))
    types += [0] * p
    seg += [0] * p
    cu = [0]
    for s in samples:
        cu.append(cu[-1] + len(s["ids"]))
    inputs = {
        "input_ids": np.array([ids], np.int64),
        "labels": np.array([labels], np.int64),
        "position_ids": np.array(rows, np.int64).reshape(4, 1, -1),
        "mm_token_type_ids": np.array([types], np.int64),
        "pixel_values": np.concatenate(pixels) if pixels else np.zeros((0, ROW), np.float32),
        "image_grid_thw": np.array(grids, np.int64).reshape(-1, 3),
    }
    meta = {
        "sample_index": np.array(indices if indices is not None else [10 * i + 3 for i in range(len(samples))],
                                 np.int64),
        "cu_seqlens": np.array(cu, np.int32),
        "max_seqlen": np.array([max(len(s["ids"]) for s in samples)], np.int32),
        "seg_ids": np.array([seg], np.int32),
    }
    return inputs, meta


def packs(seed=0, count=24):
    """(samples, pad_to, inputs, meta) over 2-4 samples of 1-50 tokens, without and with a tail pad."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        samples = [make_sample(rng) for _ in range(int(rng.integers(2, 5)))]
        if k == 0:
            samples[1] = make_sample(rng, length=1)  # a one-token segment
        pad_to = [1, 8, 64][k % 3]
        yield (samples, pad_to) + make_pack(samples, pad_to)


def as_torch(inputs):
    return {k: torch.from_numpy(v) for k, v in inputs.items()}


def host(x):
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


# ---- references, from the rules of packing-and-video.md §3 ----

def ref_fa2_detector(row0):
    """§3.6: transformers' FA2 packed detection: cu_seq_lens = cat(nonzero(pos == 0), [L])."""
    return [t for t in range(len(row0)) if row0[t] == 0] + [len(row0)]


def ref_packed_sequence_indices(row0):
    """§3.6: masking_utils.find_packed_sequence_indices = cumsum(diff(pos, prepend=pos[:1] - 1) != 1), as a loop."""
    out, prev, idx = [], row0[0] - 1, 0
    for v in row0:
        if v - prev != 1:
            idx += 1
        out.append(idx)  # the first token's diff is 1 by construction: segment 0
        prev = v
    return out


def ref_allowed(seg, q, k):
    """§3.2: LLaMA-Factory's prepare_4d_attention_mask rule; a tail pad token (seg 0) attends to itself only
    (the adapter's documented choice: LLaMA-Factory's rule would leave its row empty)."""
    if seg[q] == 0:
        return q == k
    return seg[q] == seg[k] and seg[k] != 0 and k <= q


def ref_megatron(samples, m, pad_token=PAD):
    """§3.5/§3.7: per sample, labels = labels[1:] + [-100] (pre-shifted), positions 0..L-1, loss mask where the
    shifted label is not -100; each sample right-padded to a multiple of m (pad ids, -100, positions continuing)."""
    ids, labels, pos, loss, types, cu, cu_padded = [], [], [], [], [], [0], [0]
    for s in samples:
        L = len(s["ids"])
        Lp = (L + m - 1) // m * m
        shifted = list(s["labels"][1:]) + [-100]
        ids += list(s["ids"]) + [pad_token] * (Lp - L)
        labels += shifted + [-100] * (Lp - L)
        pos += list(range(Lp))
        types += list(s["types"]) + [0] * (Lp - L)
        cu.append(cu[-1] + L)
        cu_padded.append(cu_padded[-1] + Lp)
    loss = [1.0 if v != -100 else 0.0 for v in labels]
    return ids, labels, pos, loss, types, cu, cu_padded


def attention(q, k, v, allowed):
    """Single-head attention of q over k, v (float64 torch), keys limited by allowed(i, j); a plain loop."""
    out = torch.zeros_like(q)
    scale = 1.0 / np.sqrt(q.shape[-1])
    for i in range(q.shape[0]):
        js = [j for j in range(k.shape[0]) if allowed(i, j)]
        w = torch.softmax((k[js] @ q[i]) * scale, dim=0)
        out[i] = w @ v[js]
    return out


class PackInfoTest(unittest.TestCase):
    def test_segments_from_cu_seqlens(self):
        info = PackInfo.from_cu_seqlens(np.array([0, 3, 4, 9], np.int32), total=16, sample_index=[7, -1, 2])
        self.assertEqual([(s.start, s.length, s.sample_index) for s in info.segments], [(0, 3, 7), (3, 1, -1), (4, 5, 2)])
        self.assertEqual((info.n, info.real, info.pad, info.total, info.max_seqlen), (3, 9, 7, 16, 5))
        self.assertTrue(info.segments[1].is_dummy)
        self.assertFalse(info.segments[0].is_dummy)
        self.assertEqual(info.segments[2].end, 9)
        self.assertEqual(info.seg_ids().tolist(), [1, 1, 1, 2, 3, 3, 3, 3, 3] + [0] * 7)
        self.assertIn("the dummy image", info.describe(1))
        self.assertEqual(PackInfo.from_cu_seqlens([0, 5]).total, 5)

    def test_pack_info_matches_the_built_pack(self):
        for samples, pad_to, inputs, meta in packs(1):
            info = pack_info(inputs, meta)
            start = 0
            for i, s in enumerate(samples):
                seg = info.segments[i]
                self.assertEqual((seg.start, seg.length, seg.sample_index), (start, len(s["ids"]), 10 * i + 3))
                start += len(s["ids"])
            self.assertEqual(info.real, start)
            self.assertEqual(info.total, inputs["input_ids"].shape[1])
            self.assertEqual(info.total % pad_to, 0)
            self.assertIs(check_pack(inputs, meta).total, info.total)

    def test_the_audio_families_layouts(self):
        """Qwen2-Audio's (1, T) int64 positions (row 0 alone) and Qwen3-Omni's float32 (4, 1, T) pass; a wrong row 0
        of either is refused (docs/packing.md "Audio packs")."""
        for samples, pad_to, inputs, meta in packs(3, count=6):
            qwen2_audio = dict(inputs, position_ids=inputs["position_ids"][0].copy())  # (1, T)
            self.assertEqual(check_pack(qwen2_audio, meta).total, inputs["input_ids"].shape[1])
            qwen3_omni = dict(inputs, position_ids=inputs["position_ids"].astype(np.float32) + np.float32(0))
            qwen3_omni["position_ids"][1:, 0, 1:] += np.float32(0.5)  # fractional M-RoPE past each row's first token
            qwen3_omni["position_ids"][1:, 0, meta["cu_seqlens"][:-1]] = 0  # each segment's rows start at 0
            self.assertEqual(check_pack(qwen3_omni, meta).total, inputs["input_ids"].shape[1])
            # Megatron's THD takes int64 row-0 positions from either layout, as from Qwen-VL's
            want = for_megatron_thd(inputs, meta)["position_ids"]
            for layout in (qwen2_audio, qwen3_omni):
                got = for_megatron_thd(layout, meta)["position_ids"]
                self.assertEqual(np.asarray(got).dtype, np.int64)
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            with self.assertRaises(ValueError) as cm:
                for_qwen_vl_finetune(qwen2_audio, meta)
            self.assertIn("(1, T)", str(cm.exception))
            broken = dict(qwen2_audio, position_ids=qwen2_audio["position_ids"] + 1)
            with self.assertRaises(ValueError) as cm:
                check_pack(broken, meta)
            self.assertIn("row 0", str(cm.exception))

    def test_meta_as_batch_meta_or_in_the_batch(self):
        samples, _, inputs, meta = next(packs(2))
        bm = BatchMeta(epoch=0, step=0, global_step=0, rank=0, world=1, samples=len(samples), scheduled=len(samples),
                       total_bytes=0, header_bytes=0, sample_index=meta["sample_index"], metadata=meta)
        self.assertEqual(pack_info(inputs, bm), pack_info(inputs, meta))
        merged = dict(inputs, **meta)
        self.assertEqual(pack_info(merged), pack_info(inputs, meta))
        out = for_hf_flash_attention(merged)
        for name in meta:  # pack metadata never reaches forward
            self.assertNotIn(name, out)


class ErrorsTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(5)
        self.samples = [make_sample(rng, 4), make_sample(rng, 3), make_sample(rng, 5)]
        self.inputs, self.meta = make_pack(self.samples, pad_to=8)  # T = 16, real 12

    def assertRefused(self, inputs, meta, *words, fn=pack_info):
        with self.assertRaises(ValueError) as cm:
            fn(inputs, meta)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def with_meta(self, **kw):
        return dict(self.meta, **kw)

    def test_not_a_pack(self):
        meta = {k: v for k, v in self.meta.items() if k != "cu_seqlens"}
        for fn in ADAPTERS + (pack_info, check_pack):
            self.assertRefused(self.inputs, meta, "not a packed batch", "cu_seqlens", fn=fn)
            self.assertRefused(self.inputs, None, "cu_seqlens", fn=fn)

    def test_cu_seqlens_inconsistent(self):
        cases = {
            "starts at 1": ([1, 4, 7, 12], "starts at 1"),
            "empty segment": ([0, 4, 4, 12], "segment 1 (sample 13)"),
            "decreasing": ([0, 7, 4, 12], "does not increase"),
            "beyond T": ([0, 4, 7, 17], "T = 16"),
            "huge": ([0, 4, 7, 2 ** 40], "T = 16"),
            "negative": ([0, -4, 7, 12], "does not increase"),
            "one entry": ([0], "n + 1"),
        }
        for name, (cu, word) in cases.items():
            with self.subTest(name):
                si = self.meta["sample_index"][:max(len(cu) - 1, 0)]
                self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.array(cu, np.int64), sample_index=si,
                                                               seg_ids=None, max_seqlen=None), word)
        self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.array([0, 4.0, 7, 12])), "integer")
        self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.array([[0, 4, 7, 12]], np.int32)), "1-D")
        self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.array([0, 2 ** 64 - 1], np.uint64),
                                                       sample_index=None, seg_ids=None, max_seqlen=None), "beyond")
        self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.arange(18, dtype=np.int32), sample_index=None,
                                                       seg_ids=None, max_seqlen=None), "more segments")
        for fn in ADAPTERS:
            self.assertRefused(self.inputs, self.with_meta(cu_seqlens=np.array([0, 4, 7, 99], np.int32)), "T = 16",
                               fn=fn)

    def test_seg_ids_max_seqlen_sample_index_inconsistent(self):
        seg = self.meta["seg_ids"].copy()
        seg[0, 5] = 1
        self.assertRefused(self.inputs, self.with_meta(seg_ids=seg), "seg_ids", "token 5", "segment 1 (sample 13")
        seg = self.meta["seg_ids"].copy()
        seg[0, 14] = 3
        self.assertRefused(self.inputs, self.with_meta(seg_ids=seg), "tail pad")
        self.assertRefused(self.inputs, self.with_meta(seg_ids=self.meta["seg_ids"][:, :12]), "seg_ids", "(1, 16)")
        self.assertRefused(self.inputs, self.with_meta(max_seqlen=np.array([4], np.int32)), "max_seqlen", "5")
        self.assertRefused(self.inputs, self.with_meta(sample_index=np.array([1, 2], np.int64)), "sample_index", "(3,)")
        for fn in ADAPTERS:
            self.assertRefused(self.inputs, self.with_meta(max_seqlen=np.array([9], np.int32)), "max_seqlen", fn=fn)

    def test_tensor_shapes(self):
        self.assertRefused(dict(self.inputs, input_ids=np.zeros((2, 16), np.int64)), self.meta, "(1, T)")
        self.assertRefused({k: v for k, v in self.inputs.items() if k != "input_ids"}, self.meta, "input_ids")
        self.assertRefused(dict(self.inputs, position_ids=self.inputs["position_ids"][1:]), self.meta,
                           "position_ids", "(4, 1, 16)")
        self.assertRefused(dict(self.inputs, labels=self.inputs["labels"][:, :12]), self.meta, "labels")
        with self.assertRaises(TypeError):
            pack_info(self.inputs, 42)

    def test_contents(self):
        labels = self.inputs["labels"].copy()
        labels[0, 4] = 5
        self.assertRefused(dict(self.inputs, labels=labels), self.meta, "first label", "segment 1 (sample 13",
                           fn=check_pack)
        labels = self.inputs["labels"].copy()
        labels[0, 13] = 5
        self.assertRefused(dict(self.inputs, labels=labels), self.meta, "tail pad", fn=check_pack)
        pos = self.inputs["position_ids"].copy()
        pos[0, 0, 8] = 0
        self.assertRefused(dict(self.inputs, position_ids=pos), self.meta, "row 0", "token 8", "segment 2",
                           fn=check_pack)
        pos = self.inputs["position_ids"].copy()
        pos[2, 0, 7] = 1
        self.assertRefused(dict(self.inputs, position_ids=pos), self.meta, "row 2", "segment 2", fn=check_pack)
        pack_info(dict(self.inputs, labels=labels), self.meta)  # structure only: contents are check_pack's

    def test_megatron_pad_multiple(self):
        for bad in (0, -8, True, 1 << 20, 2.0):
            with self.assertRaises(ValueError):
                for_megatron_thd(self.inputs, self.meta, pad_to_multiple_of=bad)

    def test_dtype(self):
        with self.assertRaises(TypeError):
            for_hf_sdpa(self.inputs, self.meta, dtype=np.int32)
        if torch is not None:
            with self.assertRaises(TypeError):
                for_hf_sdpa(as_torch(self.inputs), self.meta, dtype=torch.int64)


class AdapterTest(unittest.TestCase):
    """Each adapter against its project's rule, over random packs, in NumPy and (where installed) torch."""

    def kinds(self, inputs):
        yield "numpy", inputs
        if torch is not None:
            yield "torch", as_torch(inputs)

    def test_hf_flash_attention(self):
        for samples, pad_to, inputs, meta in packs(10):
            row0 = inputs["position_ids"][0, 0].tolist()
            real = int(meta["cu_seqlens"][-1])
            for kind, batch in self.kinds(inputs):
                with self.subTest(kind=kind, pad_to=pad_to):
                    out = for_hf_flash_attention(batch, meta)
                    self.assertNotIn("attention_mask", out)
                    self.assertEqual(host(out["cu_seq_lens_q"]).tolist(), ref_fa2_detector(row0))
                    self.assertIs(out["cu_seq_lens_k"], out["cu_seq_lens_q"])
                    self.assertEqual(host(out["cu_seq_lens_q"]).dtype, np.int32)
                    longest = max(b - a for a, b in zip(ref_fa2_detector(row0), ref_fa2_detector(row0)[1:]))
                    self.assertEqual((out["max_length_q"], out["max_length_k"]), (longest, longest))
                    self.assertIsInstance(out["max_length_q"], int)
                    self.assertEqual(host(out["position_ids"]).shape, (4, 1, len(row0)))
                    self.assertEqual(list(out)[:6], ["input_ids", "labels", "position_ids", "mm_token_type_ids",
                                                     "pixel_values", "image_grid_thw"])
                    dropped = for_hf_flash_attention(batch, meta, drop_tail_pad=True)
                    self.assertEqual(host(dropped["cu_seq_lens_q"]).tolist(), ref_fa2_detector(row0[:real]))
                    for name in ("input_ids", "labels", "mm_token_type_ids", "position_ids"):
                        self.assertEqual(host(dropped[name]).shape[-1], real)
                        np.testing.assert_array_equal(host(dropped[name]), inputs[name][..., :real])

    def test_sdpa_detector_separates_exactly_the_segments(self):
        """§3.6: row 0 of the canonical pack is what HF's sdpa/eager detector needs (one segment per sample)."""
        for samples, pad_to, inputs, meta in packs(11):
            row0 = inputs["position_ids"][0, 0].tolist()
            seg = meta["seg_ids"][0].tolist()
            idx = ref_packed_sequence_indices(row0)
            real = int(meta["cu_seqlens"][-1])
            self.assertEqual([i + 1 for i in idx[:real]], seg[:real])
            self.assertEqual(set(idx[real:]), {len(samples)} if real < len(row0) else set())  # the pad: one more run
            if torch is not None:  # transformers' expression itself
                pos = torch.tensor([row0])
                hf = torch.cumsum(torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1, dim=-1)
                self.assertEqual(hf[0].tolist(), idx)

    def test_hf_sdpa_mask(self):
        for samples, pad_to, inputs, meta in packs(12, count=9):
            seg = meta["seg_ids"][0].tolist()
            T = len(seg)
            for kind, batch in self.kinds(inputs):
                with self.subTest(kind=kind, pad_to=pad_to):
                    out = for_hf_sdpa(batch, meta)
                    mask = host(out["attention_mask"])
                    self.assertEqual(mask.shape, (1, 1, T, T))
                    self.assertEqual(mask.dtype, np.float32)
                    low = np.finfo(np.float32).min
                    want = np.array([[0.0 if ref_allowed(seg, q, k) else low for k in range(T)] for q in range(T)],
                                    np.float32)
                    np.testing.assert_array_equal(mask[0, 0], want)
                    self.assertTrue(all((mask[0, 0, q] == 0).any() for q in range(T)))  # no empty row
                    self.assertIs(out["position_ids"], batch["position_ids"])
            if torch is not None:
                m16 = for_hf_sdpa(as_torch(inputs), meta, dtype=torch.float16)["attention_mask"]
                self.assertEqual(m16.dtype, torch.float16)
                self.assertEqual(set(m16.float().unique().tolist()), {0.0, float(torch.finfo(torch.float16).min)})
            m64 = for_hf_sdpa(inputs, meta, dtype=np.float64)["attention_mask"]
            self.assertEqual(m64.dtype, np.float64)
            self.assertEqual(m64.min(), np.finfo(np.float64).min)

    def test_qwen_vl_finetune(self):
        for samples, pad_to, inputs, meta in packs(13):
            lengths = [len(s["ids"]) for s in samples]
            cu = [0]
            for L in lengths:
                cu.append(cu[-1] + L)
            T = inputs["input_ids"].shape[1]
            for kind, batch in self.kinds(inputs):
                with self.subTest(kind=kind, pad_to=pad_to):
                    out = for_qwen_vl_finetune(batch, meta)
                    np.testing.assert_array_equal(host(out["position_ids"]), inputs["position_ids"][1:])
                    self.assertEqual(host(out["position_ids"]).shape, (3, 1, T))
                    mask = host(out["attention_mask"])
                    self.assertEqual(mask.dtype, np.int32)
                    self.assertEqual(mask.tolist(), cu + ([T] if T > cu[-1] else []))
                    dropped = for_qwen_vl_finetune(batch, meta, drop_tail_pad=True)
                    self.assertEqual(host(dropped["attention_mask"]).tolist(), cu)
                    self.assertEqual(host(dropped["position_ids"]).shape, (3, 1, cu[-1]))
                    np.testing.assert_array_equal(host(dropped["input_ids"]), inputs["input_ids"][:, :cu[-1]])

    def test_megatron_thd(self):
        for samples, pad_to, inputs, meta in packs(14):
            for m in (1, 4, 8):
                ids, labels, pos, loss, types, cu, cu_padded = ref_megatron(samples, m)
                for kind, batch in self.kinds(inputs):
                    with self.subTest(kind=kind, pad_to=pad_to, m=m):
                        out = for_megatron_thd(batch, meta, pad_to_multiple_of=m)
                        self.assertEqual(host(out["input_ids"]).tolist(), [ids])
                        self.assertEqual(host(out["labels"]).tolist(), [labels])
                        self.assertEqual(host(out["position_ids"]).tolist(), [pos])
                        self.assertEqual(host(out["loss_mask"]).tolist(), [loss])
                        self.assertEqual(host(out["loss_mask"]).dtype, np.float32)
                        self.assertEqual(host(out["mm_token_type_ids"]).tolist(), [types])
                        self.assertEqual(host(out["cu_seqlens_q"]).tolist(), cu)
                        self.assertIs(out["cu_seqlens_kv"], out["cu_seqlens_q"])
                        self.assertEqual(host(out["cu_seqlens_q"]).dtype, np.int32)
                        if m > 1:
                            self.assertEqual(host(out["cu_seqlens_q_padded"]).tolist(), cu_padded)
                            self.assertEqual(host(out["cu_seqlens_kv_padded"]).tolist(), cu_padded)
                        else:
                            self.assertNotIn("cu_seqlens_q_padded", out)
                        longest = max(b - a for a, b in zip(cu_padded, cu_padded[1:]))
                        self.assertEqual(int(host(out["max_seqlen_q"])), longest)
                        self.assertEqual(int(host(out["max_seqlen_kv"])), longest)
                        self.assertEqual(out["total_tokens"], cu_padded[-1])
                        self.assertIsNone(out["attention_mask"])
                        np.testing.assert_array_equal(host(out["pixel_values"]), inputs["pixel_values"])
                        self.assertIs(out["image_grid_thw"], batch["image_grid_thw"])
                        # the -100 at each sample start falls out of the shift: the shifted labels of each sample
                        # are its own unshifted labels from the second on
                        for s, a in zip(samples, cu_padded):
                            self.assertEqual(host(out["labels"])[0, a:a + len(s["ids"]) - 1].tolist(), s["labels"][1:])

    def test_megatron_shift_never_crosses_a_sample(self):
        """Megatron's rule is per sample: the last label of each is -100 even where the next sample's first label
        is not (a pack check_pack refuses, but whose structure pack_info accepts: say a train_on_prompt job)."""
        rng = np.random.default_rng(16)
        samples = [make_sample(rng, 5), make_sample(rng, 3), make_sample(rng, 4)]
        for s in samples:
            s["labels"][0] = 7
        inputs, meta = make_pack(samples)
        for m in (1, 4):
            want = ref_megatron(samples, m)[1]
            for kind, batch in self.kinds(inputs):
                self.assertEqual(host(for_megatron_thd(batch, meta, pad_to_multiple_of=m)["labels"]).tolist(), [want])

    def test_torch_device_argument(self):
        if torch is None:
            self.skipTest("torch not installed")
        samples, pad_to, inputs, meta = next(packs(15))
        out = for_megatron_thd(inputs, meta, pad_to_multiple_of=4, device="cpu")  # NumPy in, torch out
        self.assertIsInstance(out["labels"], torch.Tensor)
        self.assertIsInstance(out["input_ids"], torch.Tensor)
        ids = ref_megatron(samples, 4)[0]
        self.assertEqual(out["input_ids"].tolist(), [ids])
        fa = for_hf_flash_attention(inputs, meta, device="cpu")
        self.assertIsInstance(fa["cu_seq_lens_q"], torch.Tensor)
        self.assertEqual(fa["cu_seq_lens_q"].dtype, torch.int32)
        self.assertTrue(np.shares_memory(fa["position_ids"].numpy(), inputs["position_ids"]))
        sd = for_hf_sdpa(inputs, meta, device="cpu")
        self.assertEqual(sd["attention_mask"].dtype, torch.float32)


class ViewsTest(unittest.TestCase):
    """What packing-and-video.md §3.7 calls views of the pack share its memory: nothing is copied."""

    def test_numpy_views(self):
        samples, _, inputs, meta = make_case(pad_to=1)
        fa = for_hf_flash_attention(inputs, meta)
        for name in ("input_ids", "labels", "position_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw"):
            self.assertIs(fa[name], inputs[name])
        self.assertTrue(np.shares_memory(fa["cu_seq_lens_q"], meta["cu_seqlens"]))
        ft = for_qwen_vl_finetune(inputs, meta)
        self.assertTrue(np.shares_memory(ft["position_ids"], inputs["position_ids"]))
        self.assertTrue(np.shares_memory(ft["attention_mask"], meta["cu_seqlens"]))
        mg = for_megatron_thd(inputs, meta)
        self.assertTrue(np.shares_memory(mg["input_ids"], inputs["input_ids"]))
        self.assertTrue(np.shares_memory(mg["position_ids"], inputs["position_ids"]))
        self.assertTrue(np.shares_memory(mg["cu_seqlens_q"], meta["cu_seqlens"]))
        self.assertFalse(np.shares_memory(mg["labels"], inputs["labels"]))

    def test_views_with_a_dropped_tail_pad(self):
        samples, _, inputs, meta = make_case(pad_to=64)
        for fn in (for_hf_flash_attention, for_qwen_vl_finetune):
            out = fn(inputs, meta, drop_tail_pad=True)
            for name in ("input_ids", "labels", "position_ids", "mm_token_type_ids"):
                self.assertTrue(np.shares_memory(out[name], inputs[name]), (fn.__name__, name))
            cu = out["cu_seq_lens_q" if fn is for_hf_flash_attention else "attention_mask"]
            self.assertTrue(np.shares_memory(cu, meta["cu_seqlens"]))

    def test_torch_views_through_an_stkb_batch(self):
        """Through the wire layout: the loader's zero-copy tensors and its metadata copies, as a trainer has them."""
        if torch is None:
            self.skipTest("torch not installed")
        samples, _, inputs, meta = make_case(pad_to=1)
        buf = bytearray(write_batch(dict(inputs, **meta), samples=len(samples),
                                    metadata=METADATA + ("cu_seqlens", "max_seqlen", "seg_ids")))
        batch, bmeta = read_batch(buf, as_torch=True)
        self.assertNotIn("cu_seqlens", batch)
        raw = np.frombuffer(buf, np.uint8)
        fa = for_hf_flash_attention(batch, bmeta)
        self.assertTrue(np.shares_memory(fa["position_ids"].numpy(), raw))
        self.assertTrue(np.shares_memory(fa["cu_seq_lens_q"].numpy(), bmeta.metadata["cu_seqlens"]))
        ft = for_qwen_vl_finetune(batch, bmeta)
        self.assertTrue(np.shares_memory(ft["position_ids"].numpy(), raw))
        np.testing.assert_array_equal(ft["position_ids"].numpy(), inputs["position_ids"][1:])
        self.assertTrue(np.shares_memory(ft["attention_mask"].numpy(), bmeta.metadata["cu_seqlens"]))
        self.assertEqual(check_pack(batch, bmeta).n, len(samples))


def make_case(pad_to, seed=21):
    rng = np.random.default_rng(seed)
    samples = [make_sample(rng) for _ in range(3)]
    return (samples, pad_to) + make_pack(samples, pad_to)


@unittest.skipIf(torch is None, "torch not installed")
class PaddedEquivalenceTest(unittest.TestCase):
    """Rule 1 of §3.7 on the CPU, for one attention layer: each sample run alone equals the packed run, per token."""

    def test_sdpa_mask_and_fa2_boundaries_isolate_samples(self):
        torch.manual_seed(0)
        for samples, pad_to, inputs, meta in packs(30, count=6):
            T = inputs["input_ids"].shape[1]
            q, k, v = (torch.randn(T, 8, dtype=torch.float64) for _ in range(3))
            alone = []
            start = 0
            for s in samples:
                L = len(s["ids"])
                sl = slice(start, start + L)
                alone.append(attention(q[sl], k[sl], v[sl], lambda i, j: j <= i))  # causal, the sample by itself
                start += L
            alone = torch.cat(alone)
            real = start
            with self.subTest(pad_to=pad_to):
                mask = for_hf_sdpa(as_torch(inputs), meta, dtype=torch.float64)["attention_mask"][0, 0]
                scores = (q @ k.T) / np.sqrt(8) + mask
                packed = torch.softmax(scores, dim=-1) @ v
                self.assertTrue(torch.isfinite(packed).all())
                torch.testing.assert_close(packed[:real], alone, rtol=0, atol=1e-12)
                cu = for_hf_flash_attention(as_torch(inputs), meta)["cu_seq_lens_q"].tolist()
                varlen = torch.cat([attention(q[a:b], k[a:b], v[a:b], lambda i, j: j <= i)
                                    for a, b in zip(cu, cu[1:])])
                torch.testing.assert_close(varlen[:real], alone, rtol=0, atol=0)
                mask32 = for_hf_sdpa(as_torch(inputs), meta)["attention_mask"][0, 0]
                packed32 = torch.softmax((q.float() @ k.float().T) / np.sqrt(8) + mask32, dim=-1) @ v.float()
                self.assertTrue(torch.isfinite(packed32).all())
                torch.testing.assert_close(packed32[:real], alone.float(), rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
