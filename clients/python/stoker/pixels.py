"""The compact wire format's trainer half: ``pixel_values`` from a batch's ``pixel_values_u8``.

A service started with ``--pixel-format uint8`` sends each image's resized RGB pixels instead of the
float32 ``pixel_values`` (1/8 of the bytes), with two small metadata tensors that say how to finish the
job (docs/protocol.md, section 1):

* ``pixel_values_u8`` (a model input until converted): uint8 (Σ H·W, 3), image k's H·W pixels (HWC,
  row-major) after those of the images before it, H = gh·p and W = gw·p from its ``image_grid_thw`` row (t, gh, gw);
* ``pixel_norm`` (the batch's metadata, ``loader.last_meta.pixel_norm``): float32 (2, 3), the mean and std
  per channel as the service uses them;
* ``pixel_patch`` (metadata, ``loader.last_meta.pixel_patch``): int64 (3,), patch size p, temporal patch
  size, merge size m.

:func:`to_pixel_values` (torch, on any device) and :func:`to_pixel_values_numpy` normalize and
patchify them into exactly the float32 ``pixel_values`` the float32 format carries, bit for bit:
the per-channel 256-entry table is computed with the very float32 operations of the service's
``PatchWriter`` — ``(float32(v * (1/255)) - float32(mean[c])) / float32(std[c])`` — and then
indexed, so no device arithmetic can round differently. One loop step per image; the pixel work is
a gather and a copy.

Videos (issue 29) travel the same way. A batch that holds a video carries, instead of the float32
``pixel_values_videos``:

* ``pixel_values_videos_u8`` (a model input until converted): uint8 (Σ T·H·W, 3), video k's T kept frames
  resized (HWC, frame after frame: what the video processor normalizes and patchifies) after those of the
  videos before it, H = gh·p and W = gw·p from its ``video_grid_thw`` row (t, gh, gw);
* ``video_frame_counts`` (metadata, ``loader.last_meta.metadata["video_frame_counts"]``): int64 (videos,),
  each video's T; t = ceil(T / temporal patch size), the last frame repeated up to t·temporal frames, as the
  Hugging Face video processors pad.

:func:`to_pixel_values_videos` (torch) and :func:`to_pixel_values_videos_numpy` turn them into exactly the
float32 ``pixel_values_videos`` of the float32 format, bit for bit: Stoker's ``VideoPatchWriter``
(stoker-image), itself ``normalize_fused`` + ``patchify_video`` of ``shared/reference/ref_qwenvl_video.py``,
i.e. transformers 5.18.0 / 4.57.6 ``Qwen2VLVideoProcessor`` / ``Qwen3VLVideoProcessor`` (the torchvision
backend's fused rescale and normalize): the table ``(float32(v) − float32(float32(mean)·255)) /
float32(float32(std)·255)`` (:func:`fused_normalization_table`), with the same ``pixel_norm`` as the images
(the service normalizes videos with the job's one mean and std, as ref_qwenvl_video.py gives each family
one), then the patch order of ``patchify_video``.

``Loader(..., to_pixel_values=True)`` (and ``TorchIterableDataset``) apply both to every batch that
carries ``pixel_values_u8`` or ``pixel_values_videos_u8``, so a trainer gets ``pixel_values`` and
``pixel_values_videos`` either way. A batch without any image carries its empty ``pixel_values_u8`` and
``image_grid_thw`` as metadata, not as model inputs, so it has no images to convert and is handed on
without ``pixel_values`` (an empty one fails the vision tower).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

U8 = "pixel_values_u8"
NORM = "pixel_norm"
PATCH = "pixel_patch"
PIXEL_VALUES = "pixel_values"
VIDEO_U8 = "pixel_values_videos_u8"
VIDEO_FRAME_COUNTS = "video_frame_counts"
PIXEL_VALUES_VIDEOS = "pixel_values_videos"

#: Qwen2-VL / Qwen2.5-VL (patch 14) and Qwen3-VL (patch 16) share temporal patch 2 and merge 2.
DEFAULT_PATCH = (14, 2, 2)


def normalization_table(mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """(3, 256) float32: ``table[c, v]`` is channel c's normalized value of u8 value v, computed
    with the same float32 operations as the service (so indexing it is bit-exact)."""
    mean32 = np.asarray(mean, dtype=np.float32).reshape(3)  # round to nearest, as Java's (float) cast
    std32 = np.asarray(std, dtype=np.float32).reshape(3)
    r = (np.arange(256, dtype=np.float64) * (1.0 / 255.0)).astype(np.float32)
    return ((r[None, :] - mean32[:, None]) / std32[:, None]).astype(np.float32)


def fused_normalization_table(mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """(3, 256) float32: the video processors' fused normalize (transformers' torchvision backend,
    ``rescale_and_normalize``; ``normalize_fused`` of ref_qwenvl_video.py; Stoker's
    ``PatchWriter.fusedNormalizationTable``): ``table[c, v] = (float32(v) − float32(float32(mean[c])·255)) /
    float32(float32(std[c])·255)``, every operation in float32."""
    mean32 = np.asarray(mean, dtype=np.float32).reshape(3)
    std32 = np.asarray(std, dtype=np.float32).reshape(3)
    m = (mean32 * np.float32(255.0)).astype(np.float32)
    s = (std32 * np.float32(255.0)).astype(np.float32)
    v = np.arange(256, dtype=np.float32)
    return ((v[None, :] - m[:, None]) / s[:, None]).astype(np.float32)


def _video_grids(video_grid_thw, frame_counts, temporal_patch_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """The (videos, 3) grids and (videos,) frame counts as int64, each count checked against its grid's t."""
    def host(x):
        return x.cpu() if hasattr(x, "cpu") else x
    grid = np.asarray(host(video_grid_thw), dtype=np.int64).reshape(-1, 3)
    if frame_counts is None:
        raise ValueError("pixel_values_videos_u8 needs the batch's video_frame_counts (metadata), which is missing")
    counts = np.asarray(host(frame_counts), dtype=np.int64).reshape(-1)
    if counts.shape[0] != grid.shape[0]:
        raise ValueError(f"{counts.shape[0]} video_frame_counts for {grid.shape[0]} video_grid_thw rows")
    tps = temporal_patch_size
    bad = [(k, int(c), int(t)) for k, (c, t) in enumerate(zip(counts, grid[:, 0])) if c < 1 or -(-c // tps) != t]
    if bad:
        k, c, t = bad[0]
        raise ValueError(f"video {k} has {c} frames, its grid t = {t} needs {(t - 1) * tps + 1} to {t * tps}")
    return grid, counts


def _check_video(u8_rows: int, grid: np.ndarray, counts: np.ndarray, patch_size: int, merge_size: int) -> None:
    if ((grid[:, 1:] % merge_size) != 0).any():
        raise ValueError(f"video grid sides must be multiples of the merge size {merge_size}: {grid.tolist()}")
    need = int((counts * grid[:, 1] * grid[:, 2]).sum()) * patch_size * patch_size
    if u8_rows != need:
        raise ValueError(f"pixel_values_videos_u8 has {u8_rows} pixels, video_grid_thw and video_frame_counts need {need} "
                         f"(patch size {patch_size})")


def video_output_shape(video_grid_thw, patch_size: int = 14, temporal_patch_size: int = 2) -> Tuple[int, int]:
    """(rows, row length) of the pixel_values_videos these grids make."""
    grid = np.asarray(video_grid_thw.cpu() if hasattr(video_grid_thw, "cpu") else video_grid_thw, dtype=np.int64).reshape(-1, 3)
    return int(grid.prod(axis=1).sum()), 3 * temporal_patch_size * patch_size * patch_size


def to_pixel_values_videos_numpy(u8, video_grid_thw, frame_counts, mean, std, patch_size: int = 14,
                                 temporal_patch_size: int = 2, merge_size: int = 2,
                                 out: Optional[np.ndarray] = None) -> np.ndarray:
    """NumPy version of :func:`to_pixel_values_videos`: a (rows, 3·t·p²) float32 array, new or a view of ``out``."""
    u8 = np.asarray(u8, dtype=np.uint8).reshape(-1, 3)
    p, tps, m = patch_size, temporal_patch_size, merge_size
    grid, counts = _video_grids(video_grid_thw, frame_counts, tps)
    _check_video(u8.shape[0], grid, counts, p, m)
    table = fused_normalization_table(mean, std)
    rows = int(grid.prod(axis=1).sum())
    row = 3 * tps * p * p
    if out is None:
        out = np.empty((rows, row), dtype=np.float32)
    else:
        if out.dtype != np.float32 or not out.flags.c_contiguous or out.size < rows * row:
            raise ValueError(f"out must be a C-contiguous float32 array with at least {rows * row} elements")
        out = out.reshape(-1)[:rows * row].reshape(rows, row)
    at = r0 = 0
    for (t, gh, gw), frames in zip(grid.tolist(), counts.tolist()):
        h, w = gh * p, gw * p
        clip = u8[at:at + frames * h * w].reshape(frames, h, w, 3)
        clip = clip[np.minimum(np.arange(t * tps), frames - 1)]  # the last frame repeated up to t·tps frames
        # (t, tt, bh, mh, y, bw, mw, x, c) -> rows (t, bh, bw, mh, mw), columns (c, tt, y, x): patchify_video's order
        x = clip.reshape(t, tps, gh // m, m, p, gw // m, m, p, 3).transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)
        n = t * gh * gw
        dst = out[r0:r0 + n].reshape(t, gh // m, gw // m, m, m, 3, tps, p, p)
        for c in range(3):
            dst[:, :, :, :, :, c] = table[c][x[:, :, :, :, :, c]]
        at += frames * h * w
        r0 += n
    return out


def to_pixel_values_videos(u8, video_grid_thw, frame_counts, mean, std, device=None, patch_size: int = 14,
                           temporal_patch_size: int = 2, merge_size: int = 2, out=None):
    """Normalizes and patchifies a batch's ``pixel_values_videos_u8`` into ``pixel_values_videos`` with torch, on
    ``device`` (default: where ``u8`` is; a CUDA device gets the u8 frames and does the work there).

    ``u8``: uint8 tensor or array (Σ T·H·W, 3); ``video_grid_thw``: (videos, 3) ints; ``frame_counts``: each
    video's T (the batch's metadata ``video_frame_counts``); ``mean``/``std``: the batch's ``pixel_norm`` rows;
    sizes as for :func:`to_pixel_values` (Qwen3-VL: ``patch_size=16``). ``out``: a float32 tensor on ``device``
    to write into. Returns a float32 tensor (rows, 3·temporal·p²) equal, bit for bit, to the float32
    ``pixel_values_videos`` Stoker writes (its ``VideoPatchWriter``; ``normalize_fused`` + ``patchify_video`` of
    ref_qwenvl_video.py, which match transformers 5.18.0 and 4.57.6): the table is made on the CPU with NumPy's
    float32 operations (:func:`fused_normalization_table`) and only indexed on the device.
    """
    import torch

    if isinstance(u8, np.ndarray):
        u8 = torch.from_numpy(u8)
    if u8.dtype != torch.uint8:
        raise TypeError(f"pixel_values_videos_u8 must be uint8, got {u8.dtype}")
    device = u8.device if device is None else torch.device(device)
    u8 = u8.reshape(-1, 3).to(device, non_blocking=True)
    p, tps, m = patch_size, temporal_patch_size, merge_size
    grid, counts = _video_grids(video_grid_thw, frame_counts, tps)
    _check_video(u8.shape[0], grid, counts, p, m)
    row = 3 * tps * p * p
    rows = int(grid.prod(axis=1).sum())
    if out is None:
        out = _empty((rows, row), torch.float32, device)
    else:
        if out.dtype != torch.float32 or out.device != device or not out.is_contiguous() or out.numel() < rows * row:
            raise ValueError(f"out must be a contiguous float32 tensor on {device} with at least {rows * row} elements")
        out = out.reshape(-1)[:rows * row].view(rows, row)
    if rows == 0:
        return out
    flat = torch.from_numpy(fused_normalization_table(mean, std).reshape(-1)).to(device)
    channel = torch.arange(3, dtype=torch.int64, device=device).mul_(256).view(1, 1, 1, 1, 1, 3, 1, 1, 1)
    at = r0 = 0
    for (t, gh, gw), frames in zip(grid.tolist(), counts.tolist()):
        h, w = gh * p, gw * p
        clip = u8[at:at + frames * h * w].view(frames, h, w, 3)
        # temporal groups a few at a time: the int64 index is 8 bytes per value
        step = max(1, (1 << 24) // (tps * h * w * 3))
        for g0 in range(0, t, step):
            g1 = min(t, g0 + step)
            idx = torch.arange(g0 * tps, g1 * tps, device=device).clamp_(max=frames - 1)
            x = clip.index_select(0, idx).view(g1 - g0, tps, gh // m, m, p, gw // m, m, p, 3).permute(0, 2, 5, 3, 6, 8, 1, 4, 7)
            index = x.to(torch.int64) + channel  # table index in pixel_values_videos order
            k = (g1 - g0) * gh * gw
            dst = out[r0 + g0 * gh * gw:r0 + g0 * gh * gw + k].view(-1)
            torch.index_select(flat, 0, index.reshape(-1), out=dst)
        at += frames * h * w
        r0 += t * gh * gw
    return out


def _grid_rows(image_grid_thw) -> np.ndarray:
    grid = np.asarray(image_grid_thw.cpu() if hasattr(image_grid_thw, "cpu") else image_grid_thw, dtype=np.int64)
    grid = grid.reshape(-1, 3)
    if grid.size and (grid[:, 0] != 1).any():
        raise ValueError(f"image_grid_thw has t != 1 ({grid[:, 0].tolist()}); images have t = 1")
    return grid


def _check(u8_rows: int, grid: np.ndarray, patch_size: int, merge_size: int) -> None:
    if ((grid[:, 1:] % merge_size) != 0).any():
        raise ValueError(f"grid sides must be multiples of the merge size {merge_size}: {grid.tolist()}")
    need = int((grid[:, 1] * grid[:, 2]).sum()) * patch_size * patch_size
    if u8_rows != need:
        raise ValueError(f"pixel_values_u8 has {u8_rows} pixels, image_grid_thw needs {need} "
                         f"(patch size {patch_size})")


def output_shape(image_grid_thw, patch_size: int = 14, temporal_patch_size: int = 2) -> Tuple[int, int]:
    """(rows, row length) of the pixel_values these grids make."""
    grid = _grid_rows(image_grid_thw)
    return int((grid[:, 1] * grid[:, 2]).sum()), 3 * temporal_patch_size * patch_size * patch_size


def to_pixel_values_numpy(u8, image_grid_thw, mean, std, patch_size: int = 14, temporal_patch_size: int = 2,
                          merge_size: int = 2, out: Optional[np.ndarray] = None) -> np.ndarray:
    """NumPy version of :func:`to_pixel_values`: a (rows, 3·t·p²) float32 array, new or a view of ``out``."""
    u8 = np.asarray(u8, dtype=np.uint8).reshape(-1, 3)
    grid = _grid_rows(image_grid_thw)
    p, tps, m = patch_size, temporal_patch_size, merge_size
    _check(u8.shape[0], grid, p, m)
    table = normalization_table(mean, std)
    rows = int((grid[:, 1] * grid[:, 2]).sum())
    row = 3 * tps * p * p
    if out is None:
        out = np.empty((rows, row), dtype=np.float32)
    else:
        if out.dtype != np.float32 or not out.flags.c_contiguous or out.size < rows * row:
            raise ValueError(f"out must be a C-contiguous float32 array with at least {rows * row} elements")
        out = out.reshape(-1)[:rows * row].reshape(rows, row)
    at = r0 = 0
    for _, gh, gw in grid.tolist():
        n = gh * gw
        img = u8[at:at + n * p * p].reshape(gh // m, m, p, gw // m, m, p, 3)
        img = img.transpose(0, 3, 1, 4, 6, 2, 5).reshape(n, 3, p * p)  # (bh, bw, mh, mw) rows; c, y, x columns
        dst = out[r0:r0 + n].reshape(n, 3, tps, p * p)
        for c in range(3):
            dst[:, c, 0] = table[c][img[:, c]]
        dst[:, :, 1:] = dst[:, :, :1]
        at += n * p * p
        r0 += n
    return out


def _empty(shape, dtype, device):
    """A new tensor; on the CPU through NumPy, whose large arrays get transparent huge pages (fresh 4 KiB
    pages fault one by one: an 80 MB torch.empty took 20–40× longer to fill on the development VM)."""
    import torch

    if device.type == "cpu":
        np_dtype = {torch.float32: np.float32, torch.int64: np.int64}[dtype]
        return torch.from_numpy(np.empty(shape, dtype=np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def to_pixel_values(u8, image_grid_thw, mean, std, device=None, patch_size: int = 14, temporal_patch_size: int = 2,
                    merge_size: int = 2, out=None):
    """Normalizes and patchifies a batch's ``pixel_values_u8`` into ``pixel_values`` with torch, on
    ``device`` (default: where ``u8`` is; a CUDA device moves the u8 bytes there first, 1/8 of the
    float32 bytes over PCIe, and does the work on the GPU).

    ``u8``: uint8 tensor or array (Σ H·W, 3); ``image_grid_thw``: (images, 3) ints (any device);
    ``mean``/``std``: 3 values each (the batch's ``pixel_norm`` rows, or the processor's constants);
    the sizes default to Qwen2/2.5-VL's (Qwen3-VL: ``patch_size=16``). ``out``: a float32 tensor on
    ``device`` with at least rows × 3·temporal·p² elements to write into (a reused buffer); the
    result is then a view of it. Returns a float32 tensor (rows, 3·temporal·p²) equal, bit for bit,
    to the service's float32 ``pixel_values``.
    """
    import torch

    if isinstance(u8, np.ndarray):
        u8 = torch.from_numpy(u8)
    if u8.dtype != torch.uint8:
        raise TypeError(f"pixel_values_u8 must be uint8, got {u8.dtype}")
    device = u8.device if device is None else torch.device(device)
    u8 = u8.reshape(-1, 3).to(device, non_blocking=True)
    grid = _grid_rows(image_grid_thw)
    p, tps, m = patch_size, temporal_patch_size, merge_size
    _check(u8.shape[0], grid, p, m)
    row = 3 * tps * p * p
    rows = int((grid[:, 1] * grid[:, 2]).sum())
    if out is None:
        out = _empty((rows, row), torch.float32, device)
    else:
        if out.dtype != torch.float32 or out.device != device or not out.is_contiguous() or out.numel() < rows * row:
            raise ValueError(f"out must be a contiguous float32 tensor on {device} with at least {rows * row} elements")
        out = out.reshape(-1)[:rows * row].view(rows, row)
    if rows == 0:
        return out
    # the table is made on the CPU with NumPy's float32 ops (the service's bits), then only indexed on the device
    flat = torch.from_numpy(normalization_table(mean, std).reshape(-1)).to(device)
    channel = torch.arange(3, dtype=torch.int64, device=device).mul_(256).view(1, 1, 1, 1, 3, 1, 1)
    largest = int((grid[:, 1] * grid[:, 2]).max()) * 3 * p * p
    index = _empty((largest,), torch.int64, device)  # scratch for the biggest image, reused by the others
    values = _empty((largest,), torch.float32, device)
    at = r0 = 0
    for _, gh, gw in grid.tolist():
        n = gh * gw
        k = n * 3 * p * p
        img = u8[at:at + n * p * p].view(gh // m, m, p, gw // m, m, p, 3).permute(0, 3, 1, 4, 6, 2, 5)
        idx = index[:k].view(gh // m, gw // m, m, m, 3, p, p)  # table index in pixel_values order
        torch.add(img, channel, out=idx)
        vals = torch.index_select(flat, 0, index[:k], out=values[:k])
        out[r0:r0 + n].view(n, 3, tps, p * p).copy_(vals.view(n, 3, 1, p * p).expand(n, 3, tps, p * p))
        at += n * p * p
        r0 += n
    return out


def _metadata(meta, name: str):
    """Metadata ``name`` of ``meta``: a :class:`stoker.BatchMeta` (``loader.last_meta``), or a mapping (a batch read
    by other means, e.g. the rows of an Arrow Flight stream, with its metadata by name); None when absent."""
    if meta is None:
        return None
    if isinstance(meta, Mapping):
        return meta.get(name)
    value = getattr(meta, name, None)
    if value is None:  # a metadata tensor BatchMeta has no field for (video_frame_counts): by name
        value = (getattr(meta, "metadata", None) or {}).get(name)
    return value


def patch_sizes(meta) -> Tuple[int, int, int]:
    """(patch size, temporal patch size, merge size) from a batch's metadata ``pixel_patch`` (a BatchMeta or a
    mapping); Qwen2/2.5-VL's when it has none."""
    t = _metadata(meta, PATCH)
    if t is None:
        return DEFAULT_PATCH
    v = [int(x) for x in (t.tolist() if hasattr(t, "tolist") else t)]
    if len(v) != 3:
        raise ValueError(f"pixel_patch must hold 3 integers, got {v}")
    return v[0], v[1], v[2]


def norm(meta) -> Tuple[np.ndarray, np.ndarray]:
    """(mean, std) as float32 from a batch's metadata ``pixel_norm`` (a BatchMeta or a mapping)."""
    t = _metadata(meta, NORM)
    if t is None:
        raise ValueError("a compact batch's conversion needs its metadata pixel_norm (loader.last_meta), which is missing")
    a = np.asarray(t.cpu().numpy() if hasattr(t, "cpu") else t, dtype=np.float32).reshape(2, 3)
    return a[0], a[1]


def batch_to_pixel_values(batch: dict, meta, device=None, out=None, video_out=None) -> dict:
    """The batch (its model inputs) with ``pixel_values`` in place of ``pixel_values_u8`` and
    ``pixel_values_videos`` in place of ``pixel_values_videos_u8`` (same key order otherwise), made with the
    normalization and patch sizes of ``meta``, the batch's metadata (``loader.last_meta``, or a mapping holding
    ``pixel_norm``, ``pixel_patch`` and, with videos, ``video_frame_counts``); a batch with neither is returned
    as is. Torch tensors in, torch out (on ``device``, default the tensor's); NumPy in, NumPy out. ``out``,
    ``video_out``: buffers to write the images' and the videos' values into, as for :func:`to_pixel_values`."""
    if U8 not in batch and VIDEO_U8 not in batch:
        return batch
    mean, std = norm(meta)
    p, tps, m = patch_sizes(meta)
    converted = {}
    for key, grid_key in ((U8, "image_grid_thw"), (VIDEO_U8, "video_grid_thw")):
        if key not in batch:
            continue
        u8, grid = batch[key], batch[grid_key]
        video = key == VIDEO_U8
        counts = _metadata(meta, VIDEO_FRAME_COUNTS) if video else None
        buffer = video_out if video else out
        if isinstance(u8, np.ndarray):
            if device is not None:
                raise ValueError("device needs torch tensors (Loader(as_torch=True))")
            converted[key] = (to_pixel_values_videos_numpy(u8, grid, counts, mean, std, p, tps, m, out=buffer) if video
                              else to_pixel_values_numpy(u8, grid, mean, std, p, tps, m, out=buffer))
        else:
            converted[key] = (to_pixel_values_videos(u8, grid, counts, mean, std, device, p, tps, m, out=buffer) if video
                              else to_pixel_values(u8, grid, mean, std, device, p, tps, m, out=buffer))
    result = {}
    for k, v in batch.items():
        if k == U8:
            result[PIXEL_VALUES] = converted[U8]
        elif k == VIDEO_U8:
            result[PIXEL_VALUES_VIDEOS] = converted[VIDEO_U8]
        elif k not in (NORM, PATCH, VIDEO_FRAME_COUNTS):
            result[k] = v
    return result
