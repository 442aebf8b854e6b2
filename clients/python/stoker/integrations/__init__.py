"""Glue between Stoker's client and training frameworks (docs/training-frameworks.md).

    from stoker.integrations import StokerDataset                  # torch
    from stoker.integrations.hf import StokerTrainer               # transformers (+ accelerate)
    from stoker.integrations.lightning import StokerDataModule     # lightning or pytorch_lightning

Importing this package needs neither torch nor a framework: each name is imported from its module on first
use, so ``import stoker`` and ``import stoker.integrations`` work where only NumPy is installed.
"""

from .state import MAX_STATE_BYTES, STATE_FILE, read_state, write_state

_LAZY = {
    "StokerDataset": "dataset",
    "stoker_dataloader": "dataset",
    "StokerTrainer": "hf",
    "StokerTrainerMixin": "hf",
    "StokerCheckpointCallback": "hf",
    "StokerDataModule": "lightning",
}

__all__ = ["STATE_FILE", "MAX_STATE_BYTES", "read_state", "write_state"]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker.integrations' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{module}", __name__), name)
