"""The deterministic global tensors of the multi-rank tests and the slice of them a rank saves,
shared by the test (which checks loads against the globals) and rank_worker.py (which saves)."""

import numpy as np
import torch

from gantry.checkpoint import RowShard
from util import split_rows

# name -> (shape, dtype); dim 0 is split between ranks, rows not always divisible by the ranks.
SHARDED = {
    "emb": ((37, 16), torch.float32),
    "w": ((64, 33), torch.bfloat16),
    "big": ((1024, 96), torch.float32),  # many chunks per slice, chunk ends mid-row
    "ids": ((10,), torch.int64),
}


def global_tensors(seed=7):
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, (shape, dtype) in SHARDED.items():
        if dtype == torch.int64:
            out[name] = torch.randint(-1000, 1000, shape, generator=gen, dtype=dtype)
        else:
            out[name] = torch.randn(shape, generator=gen, dtype=dtype)
    out["np"] = torch.randn(20, 3, generator=gen, dtype=torch.float64).numpy()
    out["bias"] = torch.randn(5, generator=gen)  # replicated: every rank saves all of it
    return out


def rank_state(rank, world_size, step, seed=7):
    """What rank `rank` of `world_size` saves: its rows of each sharded tensor."""
    g = global_tensors(seed)
    state = {"model": {}, "step": step, "rank": rank}
    for name in list(SHARDED) + ["np"]:
        t = g[name]
        off, rows = split_rows(t.shape[0], world_size, rank)
        state["model"][name] = RowShard(t[off:off + rows].copy() if isinstance(t, np.ndarray)
                                        else t[off:off + rows].clone(), off, t.shape[0])
    state["model"]["bias"] = g["bias"]
    return state


def shard_into(rank, world_size):
    """An `into` asking for rank `rank` of `world_size`'s rows of every tensor."""
    g = global_tensors()
    into = {"model": {}}
    for name in list(SHARDED) + ["np"]:
        t = g[name]
        off, rows = split_rows(t.shape[0], world_size, rank)
        shape = (rows,) + tuple(t.shape[1:])
        buf = np.full(shape, -1.0, dtype=t.dtype) if isinstance(t, np.ndarray) else torch.full(
            shape, -1, dtype=t.dtype)
        into["model"][name] = RowShard(buf, off, t.shape[0])
    into["model"]["bias"] = torch.zeros(5)
    return into
