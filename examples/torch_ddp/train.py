"""A real torch DDP training job fed by a Stoker service, with exact checkpoint and resume.

Run one process per rank under torchrun, beside the node's service (Debian's torch 1.13 spells it so)::

    PYTHONPATH=clients/python ./stoker launch --data DS/train.jsonl --batch 2 --nproc-per-node 2 -- \\
        /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 1 \\
        examples/torch_ddp/train.py --steps 12 --ckpt CKPT --ckpt-every 6 --log LOG

Each rank reads its batches from the service (``Loader.from_env``: the socket and job from
``STOKER_SOCKET``/``STOKER_JOB``, which launch sets; rank and world size from torchrun's ``RANK``
and ``WORLD_SIZE``) and trains :class:`TinyVisionLanguageModel` on them with DDP over gloo on the CPU. Everything that could make two runs differ is pinned (seeds, one
thread, deterministic algorithms), so a run killed and resumed from its checkpoint logs bit for bit
the losses of the run that was never interrupted; ``examples/torch_ddp/README.md`` says more.

Checkpoint (``CKPT/checkpoint.pt``): the model, the optimizer, the loader's ``state_dict()`` (the
same on every rank: the cursor of the next global step) and the step count; rank 0 writes it after a
barrier, to a temporary file renamed over the old one, so a kill at any moment leaves either the old
or the new checkpoint whole. On start an existing checkpoint is loaded and the job continues at its
step, also with another world size (the service then hands out the rest of the job's global sample
order in blocks of the new size).

Log: per rank, per step, one JSON line appended to ``LOG/rank<R>.jsonl``:
``{"step", "loss", "global_loss", "sample_index"}``; ``loss`` is this rank's own loss, ``global_loss``
the mean over the ranks (all-reduced), both as full-precision floats.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:
    from stoker import Loader
except ImportError:  # run from a checkout without PYTHONPATH: the client lies beside Maven
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    from stoker import Loader

#: Qwen-VL's <|image_pad|>: one per merged patch of an image, where the vision states go
IMAGE_PAD_ID = 151655
#: Qwen-VL's <|video_pad|>: one per merged patch of a video (pixel_values_videos, video_grid_thw)
VIDEO_PAD_ID = 151656
#: Qwen-VL's spatial merge: merge_size² consecutive pixel_values rows make one merged token
MERGE_ROWS = 4
CHECKPOINT = "checkpoint.pt"


class TinyVisionLanguageModel(nn.Module):
    """A model small enough for two CPU processes that reads a Qwen-VL batch as the real one does.

    Token ids are hashed into ``buckets`` (Qwen's 151k vocabulary would make the logits the whole
    cost). Each group of ``MERGE_ROWS`` pixel rows (one merged patch, in the order Qwen-VL's
    patchify writes them) is projected to one vision state and takes the place of its
    ``<|image_pad|>`` token, as Qwen-VL's merger does; ``image_grid_thw`` says how many there are. A
    video's rows (``pixel_values_videos``, in a batch that holds one) take its ``<|video_pad|>`` tokens
    the same way, ``video_grid_thw`` saying how many.
    A causal running mean over the attended tokens carries what came before (the image included)
    to each position, and the head predicts the next token where ``labels`` is not -100.
    """

    def __init__(self, buckets: int, dim: int, patch_dim: int):
        super().__init__()
        self.buckets = buckets
        self.embed = nn.Embedding(buckets, dim)
        self.vision = nn.Linear(patch_dim * MERGE_ROWS, dim)
        self.mix = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, buckets)

    def forward(self, input_ids, labels, attention_mask=None, pixel_values=None, image_grid_thw=None, pixel_values_videos=None,
                video_grid_thw=None, seg_ids=None, **_other_inputs):
        x = self.embed(input_ids % self.buckets)
        seen_any = False
        # images, then videos (present only in a batch that holds one): the same vision projection, as Qwen-VL's tower
        for pixels, grid, pad, what in ((pixel_values, image_grid_thw, IMAGE_PAD_ID, "image"),
                                        (pixel_values_videos, video_grid_thw, VIDEO_PAD_ID, "video")):
            if pixels is None or pixels.shape[0] == 0:
                continue
            rows = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
            if rows != pixels.shape[0] or rows % MERGE_ROWS:
                raise ValueError(f"{what}_grid_thw says {rows} pixel rows, the batch has {pixels.shape[0]}")
            vision = self.vision(pixels.reshape(rows // MERGE_ROWS, -1))
            slots = input_ids == pad
            if int(slots.sum()) != vision.shape[0]:
                raise ValueError(f"{int(slots.sum())} {what} pad tokens for {vision.shape[0]} merged patches")
            x = x.masked_scatter(slots.unsqueeze(-1), vision)
            seen_any = True
        if not seen_any:
            # A batch without images (--text-only allow): the vision weights still take part, with a zero
            # gradient, so that every rank's DDP all-reduce covers the same parameters.
            x = x + 0.0 * sum(p.sum() for p in self.vision.parameters())
        if attention_mask is not None:  # a padded batch: one sample per row, padding not attended
            seen = attention_mask.unsqueeze(-1).to(x.dtype)
            context = (x * seen).cumsum(1) / seen.cumsum(1).clamp(min=1.0)
        elif seg_ids is not None:  # a pack (--pack-tokens): one row of samples, each attending to itself only
            context = segment_running_mean(x, seg_ids)
        else:
            raise ValueError("a pack has no attention_mask: pass its seg_ids (loader.last_meta.metadata['seg_ids'])")
        h = torch.tanh(self.mix(torch.cat([x, context], dim=-1)))
        logits = self.head(h[:, :-1])
        target = labels[:, 1:]  # Qwen-VL's labels are unshifted: position t predicts token t + 1
        scored = target != -100
        if not bool(scored.any()):
            return logits.sum() * 0.0
        return F.cross_entropy(logits[scored], target[scored] % self.buckets)


def segment_running_mean(x, seg_ids):
    """The causal running mean of ``x`` (1, T, D) restarted at each segment of ``seg_ids`` (1, T): 1..n per sample,
    0 for the tail pad (attends to nothing, as nothing attends to it)."""
    seg = seg_ids.to(torch.int64)
    seen = (seg != 0).unsqueeze(-1).to(x.dtype)
    total, count = (x * seen).cumsum(1), seen.cumsum(1)
    positions = torch.arange(seg.shape[1]).unsqueeze(0)
    starts = torch.ones_like(seg, dtype=torch.bool)
    starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
    first = torch.cummax(torch.where(starts, positions, torch.zeros_like(positions)), dim=1).values  # each token's segment start
    before = (first - 1).clamp(min=0)
    has_before = (first > 0).unsqueeze(-1).to(x.dtype)
    total = total - has_before * total.gather(1, before.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    count = count - has_before * count.gather(1, before.unsqueeze(-1))
    return total / count.clamp(min=1.0)


def make_loader(state, connect_timeout_s: float, read_timeout_s: float) -> Loader:
    """This rank's Loader from the environment ``stoker launch`` and torchrun set up (``STOKER_SOCKET``,
    ``STOKER_JOB``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), resumed from ``state`` if given.

    The state is loaded before the first connection (``from_env`` does not connect): a fresh service
    moves its pipeline to a resuming cursor only while no trainer has been welcomed, so a plain HELLO
    first would spoil the resume. The service may still be starting: ``connect()`` retries until
    ``connect_timeout_s`` and then says how long it tried.
    """
    loader = Loader.from_env(as_torch=True, timeout=read_timeout_s, connect_timeout=connect_timeout_s)
    if state is not None:
        loader.load_state_dict(state)
    loader.connect()
    return loader


def save_checkpoint(path: str, step: int, model: nn.Module, optimizer, loader_state: dict) -> None:
    """Rank 0 writes the checkpoint whole or not at all: a temporary file, fsync, rename, fsync of the folder."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "loader": loader_state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def check_same_cursor(loader_state: dict, world: int) -> None:
    """Every rank of a step must hold the same loader cursor (rank 0 saves its own for all)."""
    mine = torch.tensor([loader_state["epoch"], loader_state["position"], loader_state["next_step"]], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if any(not torch.equal(mine, other) for other in every):
        raise RuntimeError(f"the ranks' loader cursors differ: {[t.tolist() for t in every]}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, required=True, help="total optimizer steps of the job (a resumed run counts the saved ones)")
    p.add_argument("--ckpt", required=True, help="checkpoint folder; an existing checkpoint.pt there is resumed")
    p.add_argument("--ckpt-every", type=int, default=0, help="save after every K steps and at the end (0: only at the end)")
    p.add_argument("--log", required=True, help="folder of the per-rank step logs rank<R>.jsonl (appended)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--buckets", type=int, default=2048, help="token ids are hashed into this many")
    p.add_argument("--patch-dim", type=int, default=1176, help="pixel_values row width: 1176 (Qwen2/2.5-VL), 1536 (Qwen3-VL)")
    p.add_argument("--pause-ms", type=float, default=0,
                   help="sleep after each step: stands in for a larger model's compute (tests use it to stop a run between checkpoints)")
    p.add_argument("--connect-timeout-s", type=float, default=120, help="how long to retry connecting to a starting service")
    p.add_argument("--read-timeout-s", type=float, default=120, help="longest wait for one batch, and for the other ranks")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.read_timeout_s))

    model = TinyVisionLanguageModel(args.buckets, args.dim, args.patch_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    ckpt_path = os.path.join(args.ckpt, CHECKPOINT)
    step, loader_state = 0, None
    if os.path.exists(ckpt_path):
        saved = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, loader_state = saved["step"], saved["loader"]
        print(f"rank {rank}: resuming at step {step} from {ckpt_path} (loader cursor epoch {loader_state['epoch']}, "
              f"position {loader_state['position']})", flush=True)
    ddp = DistributedDataParallel(model)
    os.makedirs(args.log, exist_ok=True)
    if rank == 0:
        os.makedirs(args.ckpt, exist_ok=True)

    loader = make_loader(loader_state, args.connect_timeout_s, args.read_timeout_s)

    def checkpoint() -> None:
        state = loader.state_dict()
        check_same_cursor(state, world)
        dist.barrier()
        if rank == 0:
            save_checkpoint(ckpt_path, step, model, optimizer, state)

    fed = torch.zeros(1, dtype=torch.int64)
    with open(os.path.join(args.log, f"rank{rank}.jsonl"), "a", encoding="utf-8") as log, loader:
        while step < args.steps:
            try:
                batch = next(loader)
                fed[0] = 1
            except StopIteration:
                batch, fed[0] = None, 0
            # A rank whose feed ended (END) must not leave the others waiting in DDP's all-reduce: all stop together.
            dist.all_reduce(fed)
            if fed[0] < world:
                print(f"rank {rank}: the service's feed ended at step {step}, before --steps {args.steps}", flush=True)
                if fed[0] == 0:  # every rank at END: the cursors agree, a checkpoint here resumes on a longer feed
                    checkpoint()
                # else some rank holds a batch it will not train on: its cursor is past the step; the last checkpoint stays
                break
            sample_index = [int(i) for i in loader.last_meta.sample_index]
            if "attention_mask" not in batch:  # a pack: the model isolates its samples with their segment ids
                batch = dict(batch, seg_ids=torch.from_numpy(loader.last_meta.metadata["seg_ids"]))
            loss = ddp(**batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            del batch  # its lease goes back to the service with the next request
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            global_loss /= world
            log.write(json.dumps({"step": step, "loss": loss.item(), "global_loss": global_loss.item(),
                                  "sample_index": sample_index}) + "\n")
            log.flush()
            step += 1
            if args.ckpt_every and step % args.ckpt_every == 0 or step == args.steps:
                checkpoint()
            if args.pause_ms:
                time.sleep(args.pause_ms / 1000.0)
    dist.barrier()
    if rank == 0:
        print(f"trained to step {step} of {args.steps}", flush=True)
    dist.destroy_process_group()
    # Leave without tearing torch's objects down: freeing DDP's reducer and the gloo process group when main()
    # returns hung now and then with torch 1.13 (a worker stuck after "trained to step N", seen in about 1 of
    # 200 runs here, more often under load). The log, the checkpoint and the loader are closed above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
