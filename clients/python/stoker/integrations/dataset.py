"""StokerDataset: a Stoker feed as a torch IterableDataset that knows which batches the trainer consumed.

Training frameworks fetch batches ahead of the step that uses them (Lightning's fit loop keeps one batch in
hand to know whether it is the last; Hugging Face's Trainer pulls a gradient-accumulation group at once), so
the loader's own ``state_dict()`` — the cursor after the last batch *yielded* — can be ahead of the last
batch *trained on* when a checkpoint is written, and a resume would skip the batches in between. With
consumption tracking on, the dataset keeps the loader's state after each yielded batch until the framework
says the batch was consumed, and ``state_dict()`` is the state after the last consumed one.

Threading: used from the training loop's thread only, as a Loader is.
"""

from __future__ import annotations

import collections
import functools
from typing import Callable, Optional, Union

import torch
import torch.utils.data

from ..errors import StokerError
from ..loader import Loader, check_state
from ..torch_dataset import _resolve_rank

#: Batches yielded but not yet marked consumed that a tracking dataset accepts before it concludes that
#: nothing marks consumption (a framework prefetches one or a gradient-accumulation group, not thousands).
MAX_AHEAD = 1024


def _connect(address, rank, world_size, loader_kwargs) -> Loader:
    r, w = _resolve_rank(rank, world_size)
    return Loader(address, r, w, **loader_kwargs)


class StokerDataset(torch.utils.data.IterableDataset):
    """This rank's Stoker batches (``{name: tensor}``, the model's inputs as they are) for a framework's
    DataLoader, with the loader state of the last consumed batch for its checkpoints.

    ``source`` is a ready :class:`~stoker.Loader`, or a callable taking no argument that returns a new
    one (``functools.partial(Loader.from_env, job="sft", as_torch=True)``, a lambda; :meth:`from_env` and
    :meth:`from_socket` make such datasets). A factory is called on each ``iter()`` and its loader closed when the iteration
    ends; a given Loader is iterated as it is (once: after END it yields nothing more) and left to its
    owner to close.

    * ``load_state_dict(state)``: the next ``iter()`` resumes there (the state is checked against the
      loader's job then; ``Loader.load_state_dict`` raises ValueError for a bad one). None loads nothing.
    * ``state_dict()``: without tracking, the loader's state (after the last batch yielded); with
      :meth:`track_consumption`, the state after the last batch passed to :meth:`consumed`, or, before
      any, the state the iteration started from; None before any loader has connected and with no
      state loaded (a resume from None starts at the job's start).
    * ``consumed_meta``: the :class:`~stoker.BatchMeta` of the last consumed batch (``sample_index``
      and so on), which under a prefetching framework is not ``loader.last_meta`` (the batch fetched
      ahead).

    * :meth:`with_transform`: ``fn(batch, meta)`` applied to each batch as it is yielded, with that batch's
      own metadata — the place for a packed job's adapter (``stoker.packing.for_hf_flash_attention`` and
      the others), which needs the pack's ``cu_seqlens`` while ``loader.last_meta`` is still that batch's.

    A DataLoader worker (``num_workers`` ≥ 1) is refused with StokerError, as by TorchIterableDataset:
    the state must live in the main process. Use :func:`stoker_dataloader` to build the DataLoader.
    """

    def __init__(self, source: Union[Loader, Callable[[], Loader]]):
        super().__init__()
        if isinstance(source, Loader):
            self._given: Optional[Loader] = source
            self._factory = None
        elif callable(source):
            self._given = None
            self._factory = source
        else:
            raise TypeError(f"StokerDataset needs a Loader or a callable returning one, got {type(source).__name__}")
        #: the loader of the current (or last) iteration
        self.loader: Optional[Loader] = None
        self._tracking = False
        self._pending: Optional[dict] = None   # loaded, for the next iter()
        self._start: Optional[dict] = None     # where the current iteration's connection started
        self._done = None                      # (state, meta) after the last consumed batch
        self._ahead = collections.deque()      # (state, meta) of each yielded batch not yet consumed
        #: batches marked consumed since this dataset was made
        self.consumed_batches = 0
        self._transform = None

    @classmethod
    def from_socket(cls, address=None, *, rank: Optional[int] = None, world_size: Optional[int] = None,
                    **loader_kwargs) -> "StokerDataset":
        """A dataset whose loaders connect to ``address`` (None: the job's default socket). ``rank`` and
        ``world_size`` default, at each ``iter()``, to torch.distributed's when it is initialized, else to
        RANK / WORLD_SIZE, else 0 and 1; ``loader_kwargs`` go to :class:`~stoker.Loader` (``as_torch``
        defaults to True)."""
        loader_kwargs.setdefault("as_torch", True)
        return cls(functools.partial(_connect, address, rank, world_size, loader_kwargs))

    @classmethod
    def from_env(cls, **loader_kwargs) -> "StokerDataset":
        """A dataset whose loaders are ``Loader.from_env(**loader_kwargs)`` (rank, world size and local rank from
        torchrun's RANK / WORLD_SIZE / LOCAL_RANK, socket and job from STOKER_SOCKET / STOKER_JOB, waiting for a
        service still starting; ``as_torch`` defaults to True), read at each ``iter()``."""
        loader_kwargs.setdefault("as_torch", True)
        return cls(functools.partial(Loader.from_env, **loader_kwargs))

    def with_transform(self, fn: Optional[Callable]) -> "StokerDataset":
        """Each batch is yielded as ``fn(batch, meta)`` (``meta``: the batch's own :class:`~stoker.BatchMeta`), e.g.
        ``functools.partial(stoker.packing.for_hf_sdpa, dtype=torch.bfloat16)``; None yields batches as they are.
        Returns this dataset."""
        if fn is not None and not callable(fn):
            raise TypeError(f"with_transform needs a callable (batch, meta) -> batch, got {type(fn).__name__}")
        self._transform = fn
        return self

    # ------------------------------------------------------------------ iteration

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise StokerError(f"StokerDataset needs DataLoader(num_workers=0), got num_workers={info.num_workers}: "
                              "the loader's state must live in the main process, where the framework saves it, and "
                              "the service already batches and prefetches")
        if self._factory is not None:
            loader = self._factory()
            if not isinstance(loader, Loader):
                raise TypeError(f"the StokerDataset factory returned {type(loader).__name__}, not a Loader")
            return self._iterate(loader, owned=True)
        return self._iterate(self._given, owned=False)

    def _iterate(self, loader: Loader, owned: bool):
        try:
            if self._pending is not None:
                loader.load_state_dict(self._pending)
            loader.connect()  # now, so that the starting state carries the job's fingerprint
            self._pending = None
            self.loader = loader
            # What an earlier iteration yielded and nobody marked is not this one's to mark; frameworks end an
            # iteration only once all it yielded was trained on, so in practice nothing is dropped here.
            self._ahead.clear()
            self._start = loader.state_dict()
            for batch in loader:
                if self._tracking:
                    if len(self._ahead) >= MAX_AHEAD:
                        raise StokerError(f"{MAX_AHEAD} batches were yielded and none was marked consumed: "
                                          f"consumption tracking is on but nothing calls consumed() (the "
                                          f"Trainer / Lightning glue does; a loop of your own should not "
                                          f"turn tracking on)")
                    self._ahead.append((loader.state_dict(), loader.last_meta))
                if self._transform is not None:
                    batch = self._transform(batch, loader.last_meta)
                yield batch
        finally:
            if owned:
                loader.close()

    # ------------------------------------------------------------------ consumption

    def track_consumption(self, on: bool = True) -> "StokerDataset":
        """Turns consumption tracking on (or off): from now on ``state_dict()`` is the state after the
        last batch passed to :meth:`consumed`. The glues turn it on; returns self."""
        self._tracking = on
        if not on:
            self._ahead.clear()
        return self

    def consumed(self, n: int = 1) -> None:
        """Marks the ``n`` oldest yielded, not yet consumed batches as consumed (trained on)."""
        if not self._tracking:
            raise StokerError("consumed() needs consumption tracking: call track_consumption() first")
        for _ in range(n):
            if not self._ahead:
                raise StokerError("consumed() was called for a batch this dataset never yielded: the trainer "
                                  "consumed batches of another loader, or marked one twice")
            self._done = self._ahead.popleft()
            self.consumed_batches += 1

    @property
    def consumed_meta(self):
        """The BatchMeta of the last consumed batch (None before any, or without tracking)."""
        return self._done[1] if self._done is not None else None

    # ------------------------------------------------------------------ state

    def state_dict(self) -> Optional[dict]:
        if self._pending is not None:
            return dict(self._pending)
        if not self._tracking:
            return self.loader.state_dict() if self.loader is not None else None
        if self._done is not None:
            return dict(self._done[0])
        return dict(self._start) if self._start is not None else None

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Resumes the next ``iter()`` at ``state`` (None: nothing to resume, the call does nothing). Checked
        at once against a given Loader's job; a factory's loader checks it when it is made."""
        if state is None:
            return
        if self._given is not None:
            check_state(state, self._given.job)
        elif not isinstance(state, dict):
            raise ValueError(f"not a Loader state: {type(state).__name__}, expected a dict")
        self._pending = dict(state)
        self._done = None
        self._start = None
        self._ahead.clear()


def stoker_dataloader(dataset: StokerDataset, *, pin_memory: bool = False) -> torch.utils.data.DataLoader:
    """The DataLoader a framework should iterate: ``batch_size=None`` (each item already is a batch, collated
    by the service: the default ``batch_size=1`` would add a leading dimension of 1 to every tensor),
    ``num_workers=0`` (the loader's state lives in the main process). ``pin_memory`` copies each batch into
    pinned memory (only where CUDA is available; ``Loader(pin_memory=True)`` does the same one copy earlier)."""
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0,
                                       pin_memory=bool(pin_memory and torch.cuda.is_available()))
