"""Hugging Face ``Trainer`` glue: Stoker's per-rank batches go to the model as they are, and the loader's
state travels with every checkpoint (docs/training-frameworks.md).

What the stock Trainer would do wrong with a Stoker feed, and what the mixin does instead (checked against
transformers 4.57 and 5.x, ``Trainer._get_dataloader`` / ``_inner_training_loop``):

* ``get_train_dataloader`` wraps the dataset in ``DataLoader(batch_size=per_device_train_batch_size,
  collate_fn=data_collator)`` and hands it to ``accelerator.prepare``. For an IterableDataset Accelerate
  then either lets rank 0 read and dispatches slices of its batches (``DataLoaderDispatcher``) or wraps the
  stream in ``IterableDatasetShard``, which keeps one of every W batches; both re-shard a stream the
  service already sharded per rank. The mixin returns ``DataLoader(ds, batch_size=None, num_workers=0)``
  and does not prepare it: each rank iterates its own batches, uncollated (the service collated them).
* On ``train(resume_from_checkpoint=…)`` the Trainer skips ``global_step × gradient_accumulation_steps``
  batches of the new iterator unless ``ignore_data_skip``; the resumed loader already starts at the saved
  cursor, so the mixin sets ``ignore_data_skip=True``.
* The Trainer saves no loader state. The mixin's callback writes ``stoker_loader.json`` into each
  ``checkpoint-N`` folder; ``train(resume_from_checkpoint=…)`` loads it before the first batch.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..loader import Loader
from .dataset import StokerDataset, stoker_dataloader
from .state import read_state, write_state

logger = logging.getLogger(__name__)

# Trainer(model, args, data_collator, train_dataset, ...): where train_dataset sits when given by position
_TRAIN_DATASET_ARG = 3


def _as_dataset(source):
    if source is None or isinstance(source, StokerDataset):
        return source
    if isinstance(source, Loader) or callable(source):
        return StokerDataset(source)
    return source  # not a Stoker feed: the Trainer's own path


class StokerCheckpointCallback(TrainerCallback):
    """Writes the dataset's ``state_dict()`` (the state after the last batch trained on) into each checkpoint
    folder the Trainer saves, as ``stoker_loader.json``, from the processes that save (``args.should_save``:
    the main process, or each node's with ``save_on_each_node``). Any rank's state resumes the whole job,
    also at another world size, so one file serves every rank. :class:`StokerTrainerMixin` adds it."""

    def __init__(self, dataset: StokerDataset):
        self.dataset = dataset

    def on_save(self, args, state, control, **kwargs):
        if args.should_save:
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            write_state(folder, self.dataset.state_dict())
        return control


class StokerTrainerMixin:
    """Makes a ``Trainer`` (subclass) train on a Stoker feed: ``class MyTrainer(StokerTrainerMixin, Trainer)``,
    mixin first, or :class:`StokerTrainer`.

    ``train_dataset`` is a :class:`StokerDataset`, a ready ``Loader``, or a callable returning a new Loader
    (``functools.partial(Loader.from_env, job="sft", as_torch=True)``); anything else takes the Trainer's own
    path. With a Stoker feed:

    * ``get_train_dataloader()`` is ``DataLoader(ds, batch_size=None, num_workers=0)``, not passed through
      ``accelerator.prepare`` (no re-sharding, no re-batching; the model, optimizer and scheduler are still
      prepared as usual). ``data_collator`` and ``remove_unused_columns`` do not apply to it: each batch
      already is the model's keyword arguments. ``dataloader_pin_memory`` pins where CUDA is available.
    * ``max_steps`` must be set (> 0): the feed has no length, so the Trainer cannot count epochs.
      ``per_device_train_batch_size`` only labels the logs: the batch size is ``stoker serve --batch``.
    * ``dataloader_num_workers`` must be 0 (ValueError otherwise; the client refuses workers).
    * ``ignore_data_skip`` is set to True: the loader itself resumes at the saved cursor.
    * each ``training_step`` marks one batch consumed; the callback saves the state after the last one in
      ``checkpoint-N/stoker_loader.json``; ``train(resume_from_checkpoint=path or True)`` loads it first
      (FileNotFoundError when the checkpoint has none).
    """

    def __init__(self, *args, **kwargs):
        args = list(args)
        if "train_dataset" in kwargs:
            kwargs["train_dataset"] = _as_dataset(kwargs["train_dataset"])
        elif len(args) > _TRAIN_DATASET_ARG:
            args[_TRAIN_DATASET_ARG] = _as_dataset(args[_TRAIN_DATASET_ARG])
        super().__init__(*args, **kwargs)
        ds = self.train_dataset
        if not isinstance(ds, StokerDataset):
            return
        if self.args.dataloader_num_workers:
            raise ValueError(f"dataloader_num_workers={self.args.dataloader_num_workers}: a Stoker feed needs 0 (the "
                             f"loader's state must live in the main process; the service already prefetches)")
        if not self.args.ignore_data_skip:
            # The Trainer would skip the batches it trained on before the checkpoint by drawing them from the
            # resumed loader, which already starts after them.
            self.args.ignore_data_skip = True
        ds.track_consumption()
        self.add_callback(StokerCheckpointCallback(ds))

    @property
    def stoker_dataset(self) -> Optional[StokerDataset]:
        """The Stoker feed being trained on (None when the train dataset is not one)."""
        return self.train_dataset if isinstance(self.train_dataset, StokerDataset) else None

    def get_train_dataloader(self):
        ds = self.stoker_dataset
        if ds is None:
            return super().get_train_dataloader()
        return stoker_dataloader(ds, pin_memory=self.args.dataloader_pin_memory)

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        ds = self.stoker_dataset
        if ds is not None:
            ds.consumed()
        return loss

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        ds = self.stoker_dataset
        if ds is not None and resume_from_checkpoint not in (None, False):
            folder = resume_from_checkpoint
            if folder is True:
                folder = get_last_checkpoint(self.args.output_dir)  # None: the Trainer raises its own error
            if folder is not None:
                state = read_state(folder)
                ds.load_state_dict(state)
                if state is not None:
                    logger.info("stoker: resuming the feed of job %s at epoch %d, position %d (global step %s) from %s",
                                state.get("job"), state.get("epoch"), state.get("position"), state.get("next_step"),
                                folder)
        return super().train(resume_from_checkpoint, *args, **kwargs)


class StokerTrainer(StokerTrainerMixin, Trainer):
    """``transformers.Trainer`` with :class:`StokerTrainerMixin`."""
