"""One rank of a multi-rank save (run by test_multirank.py as its own process): saves its
RowShards of sharded_state's tensors as step --step and waits until the checkpoint commits.

    rank_worker.py --root R --rank 2 --world-size 4 --step 1 [--options JSON]
"""

import argparse
import json
import sys

import torch

import gantry.checkpoint as ckpt
from sharded_state import rank_state


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--job", default="multi")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--step", type=int, default=1)
    p.add_argument("--options", default="{}", help="more Checkpointer keyword options, JSON")
    args = p.parse_args()
    torch.set_num_threads(1)
    options = json.loads(args.options)
    with ckpt.Checkpointer(args.root, job=args.job, rank=args.rank, world_size=args.world_size,
                           **options) as c:
        handle = c.save(rank_state(args.rank, args.world_size, args.step), args.step)
        print(f"rank {args.rank}: snapshot taken", flush=True)
        handle.wait()
        print(json.dumps({"rank": args.rank, "stats": handle.stats}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
