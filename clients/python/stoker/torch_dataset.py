"""TorchIterableDataset: a Loader as a torch.utils.data.IterableDataset."""

from __future__ import annotations

import os
from typing import Optional

import torch
import torch.utils.data

from .errors import StokerError
from .loader import Loader, check_state


def _resolve_rank(rank: Optional[int], world_size: Optional[int]):
    if rank is not None and world_size is not None:
        return rank, world_size
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
    else:
        r, w = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    return (r if rank is None else rank), (w if world_size is None else world_size)


class TorchIterableDataset(torch.utils.data.IterableDataset):
    """Yields this rank's batches from a Stoker service as ``{name: tensor}`` dicts of the model inputs
    (``model(**batch)`` takes them as they are; the batch's metadata, ``sample_index`` and so on, is in
    ``ds.loader.last_meta``).

    ``rank``/``world_size`` default to torch.distributed's when it is initialized, else to the
    RANK and WORLD_SIZE environment variables, else to 0 and 1. ``loader_kwargs`` go to
    :class:`Loader` (``as_torch`` defaults to True; ``to_pixel_values=True, pixel_device="cuda"``
    turns compact batches into ``pixel_values`` on the GPU; ``headspace=(N, M)`` measures the
    trainer's compute floor on M replayed steps, ``ds.loader.compute_floor_ns``).

    Use it with ``DataLoader(ds, batch_size=None, num_workers=0)``; any worker process
    (``num_workers`` of 1 or more) is refused with :class:`StokerError` at the first ``next()``. The
    loader, and with it the rank's position (``state_dict()``), must live in the main process: in a
    worker, the main process's ``ds`` never sees a batch, its ``state_dict()`` stays at epoch 0,
    position 0 with no fingerprint, and a resume from it would silently restart the job. Workers
    would gain nothing anyway: the service already batches, prefetches and does the parallel work,
    so they would only add copies.

    Each ``iter()`` opens a connection that continues the rank's feed where the service has it,
    and closes it when the feed ends or the iterator is dropped. ``ds.loader`` is the current
    Loader (``ds.loader.last_meta`` has the batch's header and metadata); ``state_dict``/``load_state_dict``
    work as Loader's (a loaded state applies to the next ``iter()``). ``load_state_dict`` checks the
    state at once, as Loader's does: ValueError for another job, a malformed state, or one whose
    fingerprint is 0 while its cursor is not the start (it cannot be checked against the job).
    """

    def __init__(self, address=None, world_size: Optional[int] = None, rank: Optional[int] = None,
                 **loader_kwargs):
        super().__init__()
        self.address = address
        self.world_size = world_size
        self.rank = rank
        loader_kwargs.setdefault("as_torch", True)
        self.loader_kwargs = loader_kwargs
        self.loader: Optional[Loader] = None
        self._state: Optional[dict] = None

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise StokerError(f"TorchIterableDataset needs DataLoader(num_workers=0), got num_workers={info.num_workers}: "
                              "the loader's state must live in the main process (in a worker, the main process's "
                              "state_dict() stays at the start, so a resume would silently restart the job; several "
                              "workers would also connect as the same rank), and the service already batches and "
                              "prefetches, so workers would only add copies")
        rank, world = _resolve_rank(self.rank, self.world_size)
        loader = Loader(self.address, rank, world, **self.loader_kwargs)
        if self._state is not None:
            loader.load_state_dict(self._state)
            self._state = None
        self.loader = loader
        return self._iterate(loader)

    @staticmethod
    def _iterate(loader: Loader):
        try:
            yield from loader
        finally:
            loader.close()

    def state_dict(self) -> dict:
        if self._state is not None:
            return dict(self._state)
        if self.loader is not None:
            return self.loader.state_dict()
        rank, world = _resolve_rank(self.rank, self.world_size)
        return {"job": self.loader_kwargs.get("job", "default"), "rank": rank, "world_size": world,
                "fingerprint": 0, "epoch": 0, "position": 0, "next_step": 0}

    def load_state_dict(self, state: dict) -> None:
        check_state(state, self.loader_kwargs.get("job", "default"))
        self._state = dict(state)
