"""The STKB batch layout (docs/protocol.md, section 1): parsing and zero-copy NumPy views.

A batch holds model inputs and metadata: a descriptor whose flags have bit 0 set
(:data:`FLAG_METADATA`) is a fact about the batch -- ``sample_index``, and in the compact format
``pixel_norm`` and ``pixel_patch`` -- that a trainer does not hand to ``forward``; a batch without any
image flags its empty ``pixel_values`` (or ``pixel_values_u8``) and ``image_grid_thw`` so too, since the
vision tower fails on them. The readers here keep the two apart: the inputs are the dict (with
``mm_token_type_ids`` from a service for transformers 5.3 and later), the metadata goes to :class:`BatchMeta`.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from .errors import ProtocolError

MAGIC = b"STKB"
#: 2: descriptors carry flags (FLAG_METADATA); version 1 had sample_index, pixel_norm and pixel_patch among the inputs
LAYOUT_VERSION = 2
HEADER_BYTES = 64
DESCRIPTOR_BYTES = 128
MAX_DIMS = 6
ALIGNMENT = 64

# magic, version, count, header bytes, total, epoch, step, rank, world, samples, scheduled, global step
_HEADER = struct.Struct("<4sIIIQQQIIIIQ")
# name, dtype, ndim, shape[6], offset, length, flags, reserved
_DESCRIPTOR = struct.Struct("<32sII6QQQI20x")
#: descriptor flag: the tensor is the batch's metadata, not a model input
FLAG_METADATA = 1
assert _HEADER.size == HEADER_BYTES and _DESCRIPTOR.size == DESCRIPTOR_BYTES

# the resume block after the descriptor table: magic, sources, epoch, position, step; then per source epoch, position
RESUME_MAGIC = b"STKR"
_RESUME = struct.Struct("<4sIQQQ")
_SOURCE_CURSOR = struct.Struct("<QQ")
MAX_RESUME_SOURCES = 64

DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<i8"), 3: np.dtype("<i4"), 4: np.dtype("u1")}
_DTYPE_NAMES = "1 float32, 2 int64, 3 int32, 4 uint8"


@dataclass(frozen=True)
class BatchMeta:
    """What the batch header says about a batch (plus the lease it came with, if any)."""

    epoch: int
    step: int  # step within the epoch
    global_step: int  # epoch * steps_per_epoch + step
    rank: int
    world: int
    samples: int  # samples delivered in this batch (B)
    scheduled: int  # samples the schedule assigned (B + skipped)
    total_bytes: int
    header_bytes: int
    lease: Optional[int] = None  # shared-memory lease id (None for copied batches)
    # where the job resumes right after this batch, as the service's schedule says: {"epoch", "position",
    # "next_step", "sources": [{"epoch", "position"}, ...]} (each source's own cursor there); None if the batch has none
    resume: Optional[dict] = None
    # The batch's metadata tensors (NumPy arrays the client owns: copies, so that they hold no lease), by name:
    # sample_index, int64 (B,): each sample's data set index (0-based), in batch order
    sample_index: Optional[np.ndarray] = field(default=None, compare=False)
    # the compact format's (--pixel-format uint8) float32 (2, 3) mean and std per channel, and int64 (3,) patch size,
    # temporal patch size, merge size: what stoker.pixels needs to make pixel_values; None in the float32 format
    pixel_norm: Optional[np.ndarray] = field(default=None, compare=False)
    pixel_patch: Optional[np.ndarray] = field(default=None, compare=False)
    # every metadata tensor of the batch by name, those above included, in descriptor order
    metadata: Dict[str, np.ndarray] = field(default_factory=dict, compare=False)


class TensorDesc(NamedTuple):
    name: str
    dtype: np.dtype
    shape: Tuple[int, ...]
    offset: int
    length: int
    metadata: bool = False  # the batch's metadata, not a model input (FLAG_METADATA)


def parse_header(buf, available: int, *, what: str = "batch") -> Tuple[BatchMeta, List[TensorDesc]]:
    """Parses and validates an STKB header and descriptor table.

    ``buf`` holds at least the header and descriptor table (e.g. a REF's header copy, or the whole
    batch); ``available`` is how many bytes the batch may occupy (REF length, BATCH payload length).
    Raises ProtocolError with the reason when anything is out of place.
    """
    have = memoryview(buf).nbytes
    if have < HEADER_BYTES:
        raise ProtocolError(f"{what}: {have} header bytes; an STKB header needs at least {HEADER_BYTES}")
    (magic, version, count, header_bytes, total, epoch, step, rank, world, samples, scheduled,
     global_step) = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise ProtocolError(f"{what}: not a Stoker batch (magic {magic!r}, expected {MAGIC!r})")
    if version != LAYOUT_VERSION:
        raise ProtocolError(f"{what}: batch layout version {version} is not supported; this client reads version "
                            f"{LAYOUT_VERSION} (since version 2 a descriptor flags the batch's metadata -- sample_index, "
                            f"pixel_norm, pixel_patch -- apart from the model inputs): use a client of the service's release")
    table_end = HEADER_BYTES + DESCRIPTOR_BYTES * count
    if header_bytes < table_end or header_bytes % ALIGNMENT:
        raise ProtocolError(f"{what}: header bytes {header_bytes} is not a multiple of {ALIGNMENT} "
                            f"covering the {count} descriptors ({table_end} bytes)")
    if have < table_end:
        raise ProtocolError(f"{what}: truncated header: {count} descriptors need {table_end} bytes, got {have}")
    if total > available:
        raise ProtocolError(f"{what}: header says {total} total bytes but only {available} bytes are there")
    if header_bytes > total:
        raise ProtocolError(f"{what}: header bytes {header_bytes} exceed the total of {total}")
    descs: List[TensorDesc] = []
    seen = set()
    for i in range(count):
        raw_name, code, ndim, *rest = _DESCRIPTOR.unpack_from(buf, HEADER_BYTES + DESCRIPTOR_BYTES * i)
        dims, offset, length, flags = rest[:MAX_DIMS], rest[MAX_DIMS], rest[MAX_DIMS + 1], rest[MAX_DIMS + 2]
        try:
            name = raw_name.split(b"\0", 1)[0].decode("ascii")
        except UnicodeDecodeError:
            raise ProtocolError(f"{what}: descriptor {i}: tensor name {raw_name!r} is not ASCII") from None
        label = f"{what}: tensor {name!r} (descriptor {i})"
        if not name:
            raise ProtocolError(f"{what}: descriptor {i} has an empty name")
        if name in seen:
            raise ProtocolError(f"{label}: duplicate name")
        seen.add(name)
        dtype = DTYPES.get(code)
        if dtype is None:
            raise ProtocolError(f"{label}: unknown dtype code {code} (known: {_DTYPE_NAMES})")
        if ndim > MAX_DIMS:
            raise ProtocolError(f"{label}: ndim {ndim} > {MAX_DIMS}")
        if any(dims[ndim:]):
            raise ProtocolError(f"{label}: shape {tuple(dims)} has non-zero unused dimensions for ndim {ndim}")
        shape = tuple(dims[:ndim])
        expected = math.prod(shape) * dtype.itemsize
        if length != expected:
            raise ProtocolError(f"{label}: length {length} bytes, but shape {shape} of {dtype.name} "
                                f"needs {expected}")
        if offset % ALIGNMENT:
            raise ProtocolError(f"{label}: offset {offset} is not a multiple of {ALIGNMENT}")
        if offset < header_bytes or offset + length > total:
            raise ProtocolError(f"{label}: bytes [{offset}, {offset + length}) lie outside the batch data "
                                f"[{header_bytes}, {total})")
        if flags & ~FLAG_METADATA:
            raise ProtocolError(f"{label}: unknown descriptor flags {flags:#x}")
        descs.append(TensorDesc(name, dtype, shape, offset, length, bool(flags & FLAG_METADATA)))
    meta = BatchMeta(epoch=epoch, step=step, global_step=global_step, rank=rank, world=world,
                     samples=samples, scheduled=scheduled, total_bytes=total, header_bytes=header_bytes,
                     resume=_parse_resume(buf, table_end, min(header_bytes, have), what))
    return meta, descs


def _parse_resume(buf, at: int, end: int, what: str) -> Optional[dict]:
    """The resume block at ``at`` (before ``end``, the header's end), or None when the batch has none."""
    if at + _RESUME.size > end:
        return None
    magic, n, epoch, position, step = _RESUME.unpack_from(buf, at)
    if magic != RESUME_MAGIC:
        return None
    if n > MAX_RESUME_SOURCES or at + _RESUME.size + _SOURCE_CURSOR.size * n > end:
        raise ProtocolError(f"{what}: the resume block names {n} sources, more than its header holds")
    sources = []
    for i in range(n):
        e, p = _SOURCE_CURSOR.unpack_from(buf, at + _RESUME.size + _SOURCE_CURSOR.size * i)
        sources.append({"epoch": e, "position": p})
    return {"epoch": epoch, "position": position, "next_step": step, "sources": sources}


def build_views(root: np.ndarray, descs: List[TensorDesc]) -> Dict[str, np.ndarray]:
    """One array per tensor of ``descs``, in table order, each a view of ``root`` (a 1-D uint8 array
    whose element 0 is the batch start): no bytes are copied."""
    return {d.name: root[d.offset:d.offset + d.length].view(d.dtype).reshape(d.shape) for d in descs}


def inputs(descs: List[TensorDesc]) -> List[TensorDesc]:
    """The model inputs' descriptors, in table order."""
    return [d for d in descs if not d.metadata]


def with_metadata(meta: BatchMeta, root: np.ndarray, descs: List[TensorDesc]) -> BatchMeta:
    """``meta`` with the batch's metadata tensors (the descriptors flagged so) copied out of ``root``."""
    found = {d.name: root[d.offset:d.offset + d.length].view(d.dtype).reshape(d.shape).copy() for d in descs if d.metadata}
    if not found:
        return meta
    return dataclasses.replace(meta, sample_index=found.get("sample_index"), pixel_norm=found.get("pixel_norm"),
                               pixel_patch=found.get("pixel_patch"), metadata=found)


def read_batch(data, *, as_torch: bool = False):
    """Parses a whole STKB batch held in ``data`` (bytes, bytearray, memoryview, mmap, uint8 array).

    Returns ``(tensors, meta)``: ``tensors`` maps each model input's name to a NumPy array (or, with
    ``as_torch``, a torch tensor) that is a view of ``data`` -- nothing is copied, so the arrays are
    read-only when ``data`` is -- in the descriptor table's order; ``meta`` is a BatchMeta, with the
    batch's metadata (``meta.sample_index`` and so on).
    """
    root = np.frombuffer(data, dtype=np.uint8)
    meta, descs = parse_header(root, root.nbytes)
    meta = with_metadata(meta, root, descs)
    arrays = build_views(root, inputs(descs))
    if as_torch:
        import torch
        arrays = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return arrays, meta
