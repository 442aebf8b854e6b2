"""Packed batches (``stoker serve --pack-tokens N``): what each training stack takes, made from Stoker's pack.

A packed job hands each rank one *pack* per step: a single row of n whole samples (segments), segment i over
tokens ``[o_i, o_i + L_i)``, T = Σ L_i plus an optional tail pad (docs/training-frameworks.md, "Packed jobs"):

* model inputs: ``input_ids`` / ``labels`` int64 (1, T), unshifted, each segment's first label -100;
  ``position_ids`` int64 (4, 1, T), row 0 = 0 … L_i-1 per segment, rows 1-3 = the segment's M-RoPE computed
  on the sample alone (Qwen3-Omni: float32 (4, 1, T), the same rows; Qwen2-Audio: int64 (1, T), row 0 alone;
  docs/packing.md "Audio packs"); ``mm_token_type_ids`` (1, T) where the job's contract has it; ``pixel_values`` and
  ``image_grid_thw`` in segment order; no ``attention_mask``;
* metadata (``loader.last_meta.metadata``): ``cu_seqlens`` int32 (n+1) over the real segments, ``max_seqlen``
  int32 (1,), ``seg_ids`` int32 (1, T) = 1 … n per token and 0 on the tail pad, ``sample_index`` int64 (n)
  (-1 for a dummy-image segment).

No training stack takes exactly that, so each function below turns a pack into one consumer's keyword
arguments, following that project's own rules (``shared/docs/packing-and-video.md`` §3):

=============================  =================================================================================
:func:`for_hf_flash_attention`  HF transformers FA2 (§3.6): 4-row ``position_ids`` as sent, no ``attention_mask``,
                                ``cu_seq_lens_q/k`` int32 and ``max_length_q/k``
:func:`for_hf_sdpa`             HF sdpa/eager: a (1, 1, T, T) additive block-diagonal causal mask (LLaMA-Factory's
                                ``allowed(q, k)`` rule, §3.2), ``position_ids`` as sent
:func:`for_qwen_vl_finetune`    the official qwen-vl-finetune (§3.1): ``position_ids`` rows 1-3, ``attention_mask``
                                = cu_seqlens
:func:`for_megatron_thd`        Megatron THD (§3.5): labels shifted per sample, ``loss_mask``, 1-D positions,
                                ``cu_seqlens_q/kv`` (+ ``_padded``), ``max_seqlen_q/kv``, ``total_tokens``
=============================  =================================================================================

Each takes the batch (the dict of model inputs, NumPy or torch) and its metadata (a :class:`~stoker.BatchMeta`,
or a dict of the metadata tensors; ``None`` looks for them in the batch dict) and returns a new dict. What can
be a view of the pack is one -- a slice of the same buffer, not copied, and left where the batch is -- and what
cannot is a new tensor, made on ``device`` (default: where the batch's ``input_ids`` are). With NumPy input and
no ``device`` the results are NumPy arrays; with ``device`` they are torch tensors (NumPy inputs wrapped with
``torch.from_numpy``, zero-copy).

A batch that is not a pack (no ``cu_seqlens``) or whose ``cu_seqlens``, ``seg_ids``, ``max_seqlen``,
``sample_index`` and T disagree raises ``ValueError`` saying which tensor and which segment: nothing is ever
indexed with an unchecked boundary. :func:`check_pack` also checks the contents the adapters rely on
(row 0 of the positions, the first label of each segment, the tail pad).

Importing this module needs only NumPy; torch is imported when a torch batch or a ``device`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

#: the label value every consumer ignores in its loss
IGNORE_INDEX = -100
#: the token of a padded position (BatchAssembler.PAD_TOKEN_ID, ``<|endoftext|>`` of the Qwen tokenizers)
PAD_TOKEN_ID = 151643

CU_SEQLENS = "cu_seqlens"
MAX_SEQLEN = "max_seqlen"
SEG_IDS = "seg_ids"
SAMPLE_INDEX = "sample_index"
#: the pack's metadata tensors: never passed to ``forward``, even when a caller merged them into the batch dict
PACK_METADATA = (CU_SEQLENS, MAX_SEQLEN, SEG_IDS, SAMPLE_INDEX)
#: the model inputs laid out along the pack's tokens (last axis of length T)
TOKEN_INPUTS = ("input_ids", "labels", "position_ids", "mm_token_type_ids")
#: a bound on ``pad_to_multiple_of`` (Megatron's alignments are small multiples of 2·CP and CP·TP)
MAX_PAD_MULTIPLE = 1 << 16


@dataclass(frozen=True)
class Segment:
    """One sample of a pack: tokens ``[start, start + length)`` of the row, and its data set index
    (-1 for the dummy image a pack carries when another rank's pack of the step has an image; None when
    the pack came without ``sample_index``)."""

    index: int  # 0-based position in the pack (its seg_id is index + 1)
    start: int
    length: int
    sample_index: Optional[int]

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def is_dummy(self) -> bool:
        return self.sample_index == -1


@dataclass(frozen=True)
class PackInfo:
    """The segments of a pack, from its ``cu_seqlens`` (validated): ``total`` is T, the row's length with the
    tail pad, ``real`` = ``cu_seqlens[-1]`` the tokens of the segments, ``pad`` = T - real."""

    segments: Tuple[Segment, ...]
    total: int
    # the pack's cu_seqlens as it came (NumPy or torch), kept so adapters can hand out views of it
    cu_seqlens: Any = field(repr=False, compare=False, default=None)

    @property
    def n(self) -> int:
        return len(self.segments)

    @property
    def real(self) -> int:
        return self.segments[-1].end

    @property
    def pad(self) -> int:
        return self.total - self.real

    @property
    def max_seqlen(self) -> int:
        return max(s.length for s in self.segments)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([s.length for s in self.segments], np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n + 1): 0, L_1, L_1 + L_2, …, real (the validated cu_seqlens, as a host array)."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    def seg_ids(self) -> np.ndarray:
        """int32 (T,): 1 … n per token, 0 on the tail pad (what the pack's ``seg_ids`` must be)."""
        out = np.zeros(self.total, np.int32)
        out[:self.real] = np.repeat(np.arange(1, self.n + 1, dtype=np.int32), self.lengths)
        return out

    def describe(self, i: int) -> str:
        """"segment i (sample s, tokens [a, b))" for error messages."""
        s = self.segments[i]
        who = "the dummy image" if s.is_dummy else ("sample ?" if s.sample_index is None else f"sample {s.sample_index}")
        return f"segment {i} ({who}, tokens [{s.start}, {s.end}))"

    @classmethod
    def from_cu_seqlens(cls, cu_seqlens, total: Optional[int] = None, sample_index=None) -> "PackInfo":
        """The segments that ``cu_seqlens`` (n + 1 boundaries, NumPy, torch or a list) describes, in a row of
        ``total`` tokens (default: ``cu_seqlens[-1]``, no tail pad), with each segment's ``sample_index``
        ((n,) or None). Raises ValueError unless the boundaries start at 0, increase strictly (no empty
        segment) and end within the row."""
        cu = _host(cu_seqlens)
        if cu.ndim != 1 or cu.dtype.kind not in "iu":
            raise ValueError(f"cu_seqlens must be a 1-D integer tensor; got {cu.dtype} of shape {cu.shape}")
        if cu.size < 2:
            raise ValueError(f"cu_seqlens has {cu.size} entries; a pack of n >= 1 segments has n + 1 boundaries")
        if cu.dtype.kind == "u" and cu.size and cu.max() > np.iinfo(np.int64).max:
            raise ValueError(f"cu_seqlens holds {cu.max()}, beyond any row length")
        cu = cu.astype(np.int64)
        if cu[0] != 0:
            raise ValueError(f"cu_seqlens starts at {cu[0]}; the first segment starts at token 0")
        lengths = np.diff(cu)
        if total is None:
            total = int(cu[-1])
        if total < 0:
            raise ValueError(f"a row of {total} tokens")
        if cu.size > total + 1:
            raise ValueError(f"cu_seqlens has {cu.size} entries: more segments than the row's {total} tokens")
        si = None
        if sample_index is not None:
            si = _host(sample_index)
            if si.ndim != 1 or si.shape[0] != cu.size - 1 or si.dtype.kind not in "iu":
                raise ValueError(f"sample_index has shape {si.shape} ({si.dtype}); the pack's cu_seqlens has "
                                 f"{cu.size - 1} segments, so it needs ({cu.size - 1},) integers")
        bad = np.flatnonzero(lengths < 1)
        if bad.size:
            i = int(bad[0])
            who = "" if si is None else f" (sample {int(si[i])})"
            raise ValueError(f"cu_seqlens does not increase at segment {i}{who}: boundaries {int(cu[i])} then "
                             f"{int(cu[i + 1])}; every segment holds at least one token")
        if cu[-1] > total:
            raise ValueError(f"cu_seqlens ends at token {int(cu[-1])}, but the row has T = {total} tokens")
        segments = tuple(Segment(i, int(cu[i]), int(lengths[i]), None if si is None else int(si[i]))
                         for i in range(cu.size - 1))
        return cls(segments, int(total), cu_seqlens)


def _is_torch(x) -> bool:
    return type(x).__module__.split(".", 1)[0] == "torch"


def _host(x) -> np.ndarray:
    """A NumPy array of x (a view for NumPy and CPU torch; a copy from a device)."""
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _metadata(meta) -> Mapping[str, Any]:
    if meta is None:
        return {}
    if isinstance(meta, Mapping):
        return meta
    md = getattr(meta, "metadata", None)
    if isinstance(md, Mapping):
        return md
    raise TypeError(f"meta must be a BatchMeta (loader.last_meta), a dict of metadata tensors or None; got "
                    f"{type(meta).__name__}")


def _lookup(name: str, batch: Mapping[str, Any], md: Mapping[str, Any]):
    value = md.get(name)
    return batch.get(name) if value is None else value


def _shape(x) -> Tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _is_float(x) -> bool:
    """Whether ``x`` (NumPy or torch) holds floating-point values (Qwen3-Omni's packed positions)."""
    kind = getattr(x.dtype, "kind", None)
    return kind == "f" if kind is not None else bool(getattr(x.dtype, "is_floating_point", False))


def pack_info(batch: Mapping[str, Any], meta=None) -> PackInfo:
    """The :class:`PackInfo` of a pack (``batch``: the model inputs; ``meta``: ``loader.last_meta`` or a dict of
    the metadata tensors; metadata missing there is looked up in ``batch``).

    Checks the structure every adapter relies on: ``cu_seqlens`` present and consistent with T (the length of
    ``input_ids`` (1, T)); ``max_seqlen``, ``sample_index`` and ``seg_ids``, when present, agreeing with it;
    ``labels``, ``position_ids`` (4, 1, T) and ``mm_token_type_ids``, when present, of the pack's length.
    Raises ValueError naming the tensor (and the segment) at fault; it never indexes out of range.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict of tensors; got {type(batch).__name__}")
    md = _metadata(meta)
    cu = _lookup(CU_SEQLENS, batch, md)
    if cu is None:
        raise ValueError(f"not a packed batch: it has no '{CU_SEQLENS}' (metadata: {sorted(md) or 'none'}; inputs: "
                         f"{sorted(batch)}). Packs come from a job served with --pack-tokens N, and the adapters "
                         f"need the batch's metadata too: pass loader.last_meta")
    ids = batch.get("input_ids")
    if ids is None:
        raise ValueError(f"the pack has no 'input_ids' (inputs: {sorted(batch)})")
    shape = _shape(ids)
    if len(shape) != 2 or shape[0] != 1:
        raise ValueError(f"input_ids has shape {shape}; a pack is one row, (1, T)")
    total = shape[1]
    info = PackInfo.from_cu_seqlens(cu, total, _lookup(SAMPLE_INDEX, batch, md))
    want = {"labels": (1, total), "mm_token_type_ids": (1, total), "position_ids": (4, 1, total)}
    for name, expected in want.items():
        x = batch.get(name)
        if name == "position_ids" and x is not None and _shape(x) == (1, total):
            continue  # Qwen2-Audio's pack: its one row of text positions (docs/packing.md "Audio packs")
        if x is not None and _shape(x) != expected:
            raise ValueError(f"{name} has shape {_shape(x)}; this pack of T = {total} tokens needs {expected}"
                             + (" (row 0 text positions, rows 1-3 M-RoPE)" if name == "position_ids" else ""))
    ms = _lookup(MAX_SEQLEN, batch, md)
    if ms is not None:
        ms = _host(ms)
        if ms.size != 1 or ms.dtype.kind not in "iu" or int(ms.reshape(-1)[0]) != info.max_seqlen:
            raise ValueError(f"max_seqlen is {ms.reshape(-1).tolist()}, but the longest segment of cu_seqlens has "
                             f"{info.max_seqlen} tokens")
    seg = _lookup(SEG_IDS, batch, md)
    if seg is not None:
        seg = _host(seg)
        if seg.shape != (1, total) or seg.dtype.kind not in "iu":
            raise ValueError(f"seg_ids has shape {seg.shape} ({seg.dtype}); the pack needs (1, {total}) integers")
        expected = info.seg_ids()
        wrong = np.flatnonzero(seg[0] != expected)
        if wrong.size:
            t = int(wrong[0])
            where = "the tail pad" if t >= info.real else info.describe(int(expected[t]) - 1)
            raise ValueError(f"seg_ids disagrees with cu_seqlens at token {t} (in {where}): {int(seg[0, t])}, "
                             f"expected {int(expected[t])}; {wrong.size} tokens differ")
    return info


def check_pack(batch: Mapping[str, Any], meta=None) -> PackInfo:
    """:func:`pack_info`, and the contents the adapters rely on: in each segment ``position_ids`` row 0 is
    0 … L-1 and rows 1-3 start at 0, and the first label is -100 (so the HF loss's global shift never
    predicts across samples); over the tail pad the labels are -100 and row 0 is 0 … p-1. Reads the whole
    of ``labels`` and ``position_ids`` (a copy to the host if they are on a device): for tests and a first
    batch, not every step. Raises ValueError naming the segment."""
    info = pack_info(batch, meta)
    pos = batch.get("position_ids")
    if pos is not None:
        pos = _host(pos)
        if pos.ndim == 2:  # Qwen2-Audio's (1, T): row 0 alone, no M-RoPE rows
            pos = pos[None]
        row0 = pos[0, 0]
        want = np.arange(info.total, dtype=np.int64) - np.repeat(
            np.concatenate([info.offsets[:-1], [info.real]]), np.append(info.lengths, info.pad))
        wrong = np.flatnonzero(row0 != want)
        if wrong.size:
            t = int(wrong[0])
            i = int(np.searchsorted(info.offsets, t, side="right")) - 1
            where = "the tail pad" if t >= info.real else info.describe(i)
            raise ValueError(f"position_ids row 0 is {int(row0[t])} at token {t} (in {where}), expected "
                             f"{int(want[t])}: row 0 must count 0, 1, … within each segment")
        starts = info.offsets[:-1]
        for r in range(1, pos.shape[0]):
            bad = np.flatnonzero(pos[r, 0, starts] != 0)
            if bad.size:
                raise ValueError(f"position_ids row {r} is {int(pos[r, 0, starts[bad[0]]])} at the start of "
                                 f"{info.describe(int(bad[0]))}: each segment's M-RoPE is computed alone and "
                                 f"starts at 0")
    labels = batch.get("labels")
    if labels is not None:
        labels = _host(labels)[0]
        bad = np.flatnonzero(labels[info.offsets[:-1]] != IGNORE_INDEX)
        if bad.size:
            raise ValueError(f"the first label of {info.describe(int(bad[0]))} is "
                             f"{int(labels[info.offsets[bad[0]]])}, not {IGNORE_INDEX}: the loss would predict "
                             f"it from the previous sample")
        tail = labels[info.real:]
        if (tail != IGNORE_INDEX).any():
            raise ValueError(f"the tail pad (tokens [{info.real}, {info.total})) carries labels; it must be "
                             f"{IGNORE_INDEX}")
    return info


class _Out:
    """Where an adapter's results go: NumPy, or torch on ``device`` (new tensors there; views stay put)."""

    def __init__(self, batch: Mapping[str, Any], device):
        ids = batch["input_ids"]
        self.torch = None
        if _is_torch(ids) or device is not None:
            import torch
            self.torch = torch
            self.device = torch.device(device) if device is not None else (
                ids.device if _is_torch(ids) else torch.device("cpu"))

    def view(self, x):
        """x itself (NumPy in NumPy mode, torch as it is; a NumPy array wrapped zero-copy in torch mode)."""
        if self.torch is not None and not _is_torch(x):
            return self.torch.from_numpy(np.asarray(x))
        return x

    def small(self, x, np_dtype):
        """x (host array or tensor) as ``np_dtype`` on the device: a view where it already is that, else a copy."""
        if self.torch is None:
            x = _host(x)
            return x if x.dtype == np_dtype else x.astype(np_dtype)
        t = self.torch
        tdtype = getattr(t, np.dtype(np_dtype).name)
        if not _is_torch(x):
            x = np.asarray(x)
            x = t.from_numpy(x if x.dtype == np_dtype else x.astype(np_dtype))
        return x.to(device=self.device, dtype=tdtype)

    def on_device(self, x):
        """A torch token tensor moved to the device (no copy if it is there); NumPy as it is."""
        if self.torch is None:
            return _host(x)
        return self.view(x).to(self.device)

    def full(self, shape, value, like):
        if self.torch is None:
            return np.full(shape, value, dtype=_host(like).dtype if not isinstance(like, np.dtype) else like)
        dtype = like.dtype if _is_torch(like) else getattr(self.torch, np.dtype(getattr(like, "dtype", like)).name)
        return self.torch.full(shape, value, dtype=dtype, device=self.device)

    def index(self, idx: np.ndarray):
        return idx if self.torch is None else self.torch.from_numpy(idx).to(self.device)


def _passed_inputs(batch: Mapping[str, Any], out: _Out, drop=("attention_mask",)) -> Dict[str, Any]:
    """The batch's model inputs, in order, minus ``drop`` and any pack metadata merged into the dict."""
    return {k: out.view(v) for k, v in batch.items() if k not in drop and k not in PACK_METADATA}


def _without_tail(d: Dict[str, Any], real: int) -> None:
    for name in TOKEN_INPUTS:
        if name in d:
            d[name] = d[name][..., :real]


def _boundaries(info: PackInfo, out: _Out, drop_tail_pad: bool):
    """(cu, max): the pack's cu_seqlens (a view when it is int32), or, with a tail pad kept, the same plus T
    (the pad as a last pseudo-segment, as HF's FA2 detector ``cat(nonzero(row0 == 0), [T])`` sees it)."""
    if info.pad and not drop_tail_pad:
        return out.small(np.append(info.offsets, info.total).astype(np.int32), np.int32), max(info.max_seqlen,
                                                                                              info.pad)
    return out.small(info.cu_seqlens, np.int32), info.max_seqlen


def for_hf_flash_attention(batch: Mapping[str, Any], meta=None, *, device=None,
                           drop_tail_pad: bool = False) -> Dict[str, Any]:
    """Keyword arguments for a Hugging Face Qwen-VL model with ``attn_implementation="flash_attention_2"``
    (transformers 4.54 or later, which take 4-row position ids; packing-and-video.md §3.6).

    The batch's model inputs as they are (views), without ``attention_mask`` (a 2-D mask would override the
    packed boundaries, so a pack passes none), ``position_ids`` (4, 1, T) as sent (row 0 restarts at 0 in each
    segment, which is also what HF's own detector looks for), plus ``cu_seq_lens_q`` = ``cu_seq_lens_k`` int32
    (one tensor: the pack's ``cu_seqlens``, a view of the metadata's) and ``max_length_q`` = ``max_length_k``
    (ints: the longest segment). A tail pad is kept as one more pseudo-segment (``cu_seq_lens`` gets T appended,
    a new tensor; the pad's outputs are defined and carry no labels), or, with ``drop_tail_pad``, cut off: the
    token inputs become views of the real tokens only."""
    info = pack_info(batch, meta)
    out = _Out(batch, device)
    result = _passed_inputs(batch, out)
    if drop_tail_pad:
        _without_tail(result, info.real)
    cu, longest = _boundaries(info, out, drop_tail_pad)
    result.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
    return result


def for_hf_sdpa(batch: Mapping[str, Any], meta=None, *, dtype=None, device=None) -> Dict[str, Any]:
    """Keyword arguments for a Hugging Face Qwen-VL model with ``attn_implementation="sdpa"`` or ``"eager"``.

    The batch's model inputs as they are (views; ``position_ids`` (4, 1, T) as sent) plus ``attention_mask``,
    a new additive (1, 1, T, T) mask of ``dtype`` (default float32; torch's or NumPy's, as the batch) on the
    device: 0.0 where query q and key k lie in the same segment and k <= q, the dtype's minimum elsewhere --
    LLaMA-Factory's ``allowed(q, k) = idx[q] == idx[k] and idx[k] != 0 and k <= q`` over ``seg_ids``
    (packing-and-video.md §3.2). A 4-D mask is used by transformers as given, so no detector runs. Tail pad
    tokens (seg id 0) attend to themselves only: a row with no allowed key would make softmax uniform over the
    row, or NaN in half precision; their outputs carry no labels and no real token attends to them.

    The mask holds T² entries (1 GiB at T = 16384 in float32): for long packs prefer FA2."""
    info = pack_info(batch, meta)  # seg_ids, when sent, is checked equal to the segments of cu_seqlens
    out = _Out(batch, device)
    total, longest = info.total, info.max_seqlen
    # The rule, allowed(q, k) = seg[q] == seg[k] != 0 and k <= q, is a causal block per segment on the
    # diagonal: fill the minimum once, then zero each segment's lower triangle (Σ L_i² writes, not T²
    # comparisons), and the diagonal of the tail pad.
    pads = np.arange(info.real, total)
    if out.torch is None:
        dt = np.dtype(np.float32 if dtype is None else dtype)
        if dt.kind != "f":
            raise TypeError(f"dtype {dt} is not a floating type")
        mask = np.full((total, total), np.finfo(dt).min, dt)
        causal = np.tril(np.ones((longest, longest), bool))
        for s in info.segments:
            mask[s.start:s.end, s.start:s.end][causal[:s.length, :s.length]] = 0
        mask[pads, pads] = 0
    else:
        t = out.torch
        dt = t.float32 if dtype is None else dtype
        if not isinstance(dt, t.dtype) or not dt.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype for a torch batch; got {dtype!r}")
        mask = t.full((total, total), t.finfo(dt).min, dtype=dt, device=out.device)
        causal = t.ones((longest, longest), dtype=t.bool, device=out.device).tril_()
        for s in info.segments:
            mask[s.start:s.end, s.start:s.end].masked_fill_(causal[:s.length, :s.length], 0.0)
        if pads.size:
            idx = out.index(pads)
            mask[idx, idx] = 0.0
    mask = mask[None, None]
    result = _passed_inputs(batch, out)
    result["attention_mask"] = mask
    return result


def for_qwen_vl_finetune(batch: Mapping[str, Any], meta=None, *, device=None,
                         drop_tail_pad: bool = False) -> Dict[str, Any]:
    """Keyword arguments in the official qwen-vl-finetune's packed convention (QwenLM ``qwen-vl-finetune``,
    ``FlattenedDataCollatorForSupervisedDataset`` with its flash-attention monkeypatch; packing-and-video.md
    §3.1): ``position_ids`` = rows 1-3 of the pack's (3, 1, T) (a view) and ``attention_mask`` = the pack's
    ``cu_seqlens`` int32 (n + 1) (a view of the metadata's) -- not a mask: its patched attention reads the
    boundaries from it. The other inputs as they are. A tail pad becomes one more pseudo-segment (T appended
    to ``attention_mask``, a new tensor) or, with ``drop_tail_pad``, is cut off (views of the real tokens)."""
    info = pack_info(batch, meta)
    if batch.get("position_ids") is None:
        raise ValueError("the pack has no position_ids; qwen-vl-finetune needs the M-RoPE rows 1-3")
    if len(_shape(batch["position_ids"])) != 3:
        raise ValueError(f"position_ids has shape {_shape(batch['position_ids'])}: a pack without M-RoPE rows (Qwen2-Audio's "
                         f"(1, T)); qwen-vl-finetune needs rows 1-3 of a (4, 1, T) pack")
    out = _Out(batch, device)
    result = _passed_inputs(batch, out)
    result["position_ids"] = result["position_ids"][1:]
    if drop_tail_pad:
        _without_tail(result, info.real)
    result["attention_mask"], _ = _boundaries(info, out, drop_tail_pad)
    return result


def for_megatron_thd(batch: Mapping[str, Any], meta=None, *, pad_to_multiple_of: int = 1,
                     pad_token_id: int = PAD_TOKEN_ID, device=None) -> Dict[str, Any]:
    """A Megatron-Core THD batch, in Megatron-Bridge's field names (``build_mcore_thd_sequence_batch_from_rows``;
    packing-and-video.md §3.5, §3.7):

    * ``input_ids`` (1, Tp): the real tokens (the pack's tail pad dropped), each segment right-padded with
      ``pad_token_id`` to a multiple of ``pad_to_multiple_of`` (Megatron's ``lcm(2·CP, CP·TP)`` alignment);
      a view when nothing is padded;
    * ``labels`` (1, Tp): shifted left by one within each sample, the sample's last label -100 (so the -100 at
      each sample's start is what the previous sample's last token would have predicted: nothing crosses a
      boundary), -100 on alignment pads; always new;
    * ``loss_mask`` float32 (1, Tp): 1.0 where ``labels`` != -100;
    * ``position_ids`` (1, Tp): 0 … L_i-1 per sample, continued over its alignment pad (row 0 of the pack's
      positions, a view, when nothing is padded); Megatron-Bridge's Qwen-VL computes M-RoPE inside the model;
    * ``mm_token_type_ids`` (where the pack has it) laid out like ``input_ids``, pads 0;
    * ``attention_mask`` None; ``cu_seqlens_q`` = ``cu_seqlens_kv`` int32 (n + 1): the unpadded boundaries
      (the pack's cu_seqlens, a view); ``cu_seqlens_q_padded`` = ``cu_seqlens_kv_padded`` (only with
      ``pad_to_multiple_of`` > 1): the padded ones; ``max_seqlen_q`` = ``max_seqlen_kv``: the longest padded
      segment, a 0-d int32 tensor on the CPU as Megatron-Bridge makes it; ``total_tokens`` = Tp (an int);
    * the vision inputs (``pixel_values``, ``image_grid_thw``) as they are.
    """
    if isinstance(pad_to_multiple_of, bool) or not isinstance(pad_to_multiple_of, (int, np.integer)) \
            or not 1 <= pad_to_multiple_of <= MAX_PAD_MULTIPLE:
        raise ValueError(f"pad_to_multiple_of must be an integer in [1, {MAX_PAD_MULTIPLE}]; got {pad_to_multiple_of!r}")
    info = pack_info(batch, meta)
    if batch.get("labels") is None:
        raise ValueError("the pack has no labels; Megatron's THD batch needs them (shifted per sample)")
    m = int(pad_to_multiple_of)
    out = _Out(batch, device)
    real = info.real
    lengths = info.lengths
    padded = -(-lengths // m) * m
    cu_padded = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)
    total = int(cu_padded[-1])
    is_padded = total != real

    result = _passed_inputs(batch, out, drop=("attention_mask", "input_ids", "labels", "position_ids",
                                              "mm_token_type_ids"))
    # labels shifted left within each sample, the last of each sample -100, on the device
    labels = out.on_device(batch["labels"])[..., :real]
    shifted = out.full((1, real), IGNORE_INDEX, labels)
    shifted[:, :real - 1] = labels[:, 1:real]
    shifted[:, out.index(info.offsets[1:] - 1)] = IGNORE_INDEX
    if is_padded:
        dest = out.index(np.arange(real, dtype=np.int64) + np.repeat(cu_padded[:-1] - info.offsets[:-1], lengths))

        def spread(x, fill):
            full = out.full((1, total), fill, x)
            full[:, dest] = x
            return full

        result["input_ids"] = spread(out.on_device(batch["input_ids"])[..., :real], pad_token_id)
        result["labels"] = spread(shifted, IGNORE_INDEX)
        positions = np.arange(total, dtype=np.int64) - np.repeat(cu_padded[:-1], padded)
        result["position_ids"] = out.small(positions[None], np.int64)
        if batch.get("mm_token_type_ids") is not None:
            result["mm_token_type_ids"] = spread(out.on_device(batch["mm_token_type_ids"])[..., :real], 0)
    else:
        result["input_ids"] = out.view(batch["input_ids"])[..., :real]
        result["labels"] = shifted
        pos = batch.get("position_ids")
        if pos is None or _is_float(pos):  # none, or Qwen3-Omni's float32 rows: int64 ones, made
            positions = np.arange(real, dtype=np.int64) - np.repeat(info.offsets[:-1], lengths)
            result["position_ids"] = out.small(positions[None], np.int64)
        elif len(_shape(pos)) == 2:  # Qwen2-Audio's (1, T): the row itself
            result["position_ids"] = out.view(pos)[:, :real]
        else:
            result["position_ids"] = out.view(pos)[0, :, :real]  # row 0: 0 … L_i-1 per segment
        if batch.get("mm_token_type_ids") is not None:
            result["mm_token_type_ids"] = out.view(batch["mm_token_type_ids"])[..., :real]
    labels_out = result["labels"]
    result["loss_mask"] = ((labels_out != IGNORE_INDEX).astype(np.float32) if out.torch is None
                           else (labels_out != IGNORE_INDEX).float())
    result["attention_mask"] = None
    cu = out.small(info.cu_seqlens, np.int32)
    result["cu_seqlens_q"] = result["cu_seqlens_kv"] = cu
    if m > 1:
        cp = out.small(cu_padded.astype(np.int32), np.int32)
        result["cu_seqlens_q_padded"] = result["cu_seqlens_kv_padded"] = cp
    longest = int(padded.max())
    if out.torch is None:
        result["max_seqlen_q"], result["max_seqlen_kv"] = np.array(longest, np.int32), np.array(longest, np.int32)
    else:
        result["max_seqlen_q"] = out.torch.tensor(longest, dtype=out.torch.int32)
        result["max_seqlen_kv"] = out.torch.tensor(longest, dtype=out.torch.int32)
    result["total_tokens"] = total
    return result
