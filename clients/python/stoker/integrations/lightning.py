"""Lightning glue: a LightningDataModule over a Stoker feed whose state goes into Lightning's checkpoints
(docs/training-frameworks.md). Works with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``.
"""

from __future__ import annotations

from typing import Callable, Union

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl

from ..loader import Loader
from .dataset import StokerDataset, stoker_dataloader

#: The key of the loader state in the data module's checkpoint entry.
STATE_KEY = "stoker_loader"


class StokerDataModule(pl.LightningDataModule):
    """``train_dataloader()`` is ``DataLoader(StokerDataset, batch_size=None, num_workers=0)`` over this
    rank's batches; ``state_dict()`` / ``load_state_dict()`` carry the loader state of the last batch
    trained on in Lightning's checkpoints (under the data module's class name, ``{"stoker_loader": state}``),
    so ``trainer.fit(model, datamodule=dm, ckpt_path=…)`` resumes the feed at the saved cursor.

    ``source``: a :class:`StokerDataset`, a ready ``Loader``, or a callable returning a new Loader
    (``functools.partial(Loader.from_env, job="sft", as_torch=True)``).

    Lightning's fit loop fetches one batch ahead of the step (``_PrefetchDataFetcher``: a loader without a
    length must be probed for its end), so the loader has always yielded one batch more than was trained on.
    The module counts a batch as consumed in ``on_before_batch_transfer`` (called once per training batch,
    just before its step) and saves the state after the last consumed one. A LightningModule that also
    overrides ``on_before_batch_transfer`` is not called for it (Lightning prefers the data module's);
    subclass this module and call ``super()`` instead, or use ``on_after_batch_transfer``.

    Trainer flags: ``max_steps`` (the feed has no length, so an epoch lasts until the service ends the feed)
    and ``use_distributed_sampler=False`` (Lightning does not inject a sampler into an iterable dataset's
    loader anyway; the flag says so and keeps it so). The batch size is ``stoker serve --batch``.
    """

    def __init__(self, source: Union[StokerDataset, Loader, Callable[[], Loader]], *, pin_memory: bool = False):
        super().__init__()
        self.dataset = source if isinstance(source, StokerDataset) else StokerDataset(source)
        self.dataset.track_consumption()
        self.pin_memory = pin_memory

    def train_dataloader(self):
        return stoker_dataloader(self.dataset, pin_memory=self.pin_memory)

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        trainer = self.trainer
        if trainer is not None and trainer.training:
            self.dataset.consumed()
        return batch

    def state_dict(self):
        state = self.dataset.state_dict()
        return {STATE_KEY: state} if state is not None else {}

    def load_state_dict(self, state_dict) -> None:
        self.dataset.load_state_dict(state_dict.get(STATE_KEY))
