"""Python client for Stoker's local trainer protocol (docs/protocol.md, section 2; ``PROTOCOL_VERSION``).

    from stoker import Loader
    with Loader.from_env(as_torch=True) as loader:   # RANK, WORLD_SIZE (torchrun), STOKER_SOCKET, STOKER_JOB
        for batch in loader:        # {name: tensor}, zero-copy views of shared memory
            ...
    loader.timings()                # [(wait_ns, step_ns), ...]: what the service's wait ratio is made of

or ``Loader("/run/user/1000/stoker/default.sock", rank, world_size, as_torch=True)``.

A packed job's batch (``--pack-tokens N``: one row of whole samples) goes to a training stack through the
adapters of ``stoker.packing``: ``for_hf_flash_attention(batch, loader.last_meta)``, ``for_hf_sdpa``,
``for_qwen_vl_finetune``, ``for_megatron_thd`` (docs/training-frameworks.md, "Packed jobs").

``TorchIterableDataset`` is imported lazily (it needs torch); so is torch inside
``to_pixel_values`` (the compact wire format's conversion, ``stoker.pixels``).
"""

from .errors import ProtocolError, StokerError
from .layout import BatchMeta, TensorDesc, parse_header, read_batch
from .loader import Loader, default_address, is_view_of_segment
from .packing import (PackInfo, Segment, check_pack, for_hf_flash_attention, for_hf_sdpa, for_megatron_thd,
                      for_qwen_vl_finetune, pack_info)
from .pixels import (batch_to_pixel_values, fused_normalization_table, normalization_table, to_pixel_values,
                     to_pixel_values_numpy, to_pixel_values_videos, to_pixel_values_videos_numpy)
from .protocol import VERSION as PROTOCOL_VERSION
from ._version import __version__  # the release's, as `stoker --version` prints it

# TorchIterableDataset (alias IterableDataset) is left out of __all__ so that `import *` needs no torch.
__all__ = ["Loader", "StokerError", "ProtocolError", "read_batch", "parse_header", "BatchMeta", "TensorDesc",
           "is_view_of_segment", "default_address", "PROTOCOL_VERSION", "to_pixel_values", "to_pixel_values_numpy",
           "to_pixel_values_videos", "to_pixel_values_videos_numpy", "fused_normalization_table",
           "normalization_table", "batch_to_pixel_values", "PackInfo", "Segment", "pack_info", "check_pack",
           "for_hf_flash_attention", "for_hf_sdpa", "for_qwen_vl_finetune", "for_megatron_thd"]


def __getattr__(name):
    if name in ("TorchIterableDataset", "IterableDataset"):
        from .torch_dataset import TorchIterableDataset
        return TorchIterableDataset
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")
