#!/usr/bin/python3
"""Samples/s through DataLoader workers of a set whose first shard holds small samples (100
bytes) and every later one large samples (1 MiB), read in its own order in batches of 4: each
worker's batch ring is sized from its first batch (64 KiB, the least), which holds none of the
later ones. Two loaders alternate in one run:

  grown  the default ring (shared_batches=None): it is replaced by a larger one when a batch
         comes that it holds fewer than 4 of (gantry.data._worker_ring)
  fixed  shared_batches="64K": the ring the first batch sizes, which never grows, so every
         large batch crosses the workers' pipe as bytes (as every default ring did before
         rings grew)

Each pass is a plain DataLoader started afresh, as a training job's first epoch is.

  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/data_ring_growth.py \\
      [--workers 2] [--repeat 3] [--large-shards 40]
"""

import argparse
import io
import os
import statistics
import tarfile
import tempfile
import time

import torch

from gantry.data import StreamingDataset


def write_set(folder, large_shards):
    big = os.urandom((1 << 20) + 4096)  # incompressible; each sample a different slice
    for s in range(large_shards + 1):
        count, size = (64, 100) if s == 0 else (16, 1 << 20)
        with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w") as tar:
            for i in range(count):
                info = tarfile.TarInfo(f"s{s:04d}-{i:03d}.bin")
                info.size = size
                tar.addfile(info, io.BytesIO(big[i:i + size]))
    return 64 + 16 * large_shards


def samples_per_second(folder, workers, shared_batches, count):
    ds = StreamingDataset(folder, decode=False, batch_size=4, shuffle=False, batched=True,
                          shared_batches=shared_batches)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    start = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch["__key__"])
    elapsed = time.perf_counter() - start
    if n != count:
        raise SystemExit(f"read {n} samples of {count}")
    return n / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large-shards", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="gantry-ring-growth-") as folder:
        count = write_set(folder, args.large_shards)
        rates = {"grown": [], "fixed": []}
        for _ in range(args.repeat):
            rates["grown"].append(samples_per_second(folder, args.workers, None, count))
            rates["fixed"].append(samples_per_second(folder, args.workers, "64K", count))
    print(f"{count} samples, {args.workers} workers, {args.repeat} passes each, alternating\n")
    print("| ring | samples/s, median | passes |")
    print("|---|---:|---|")
    for name, r in rates.items():
        print(f"| {name} | {statistics.median(r):,.0f} | {', '.join(f'{x:,.0f}' for x in r)} |")
    ratio = statistics.median(rates["grown"]) / statistics.median(rates["fixed"])
    print(f"\ngrown / fixed: {ratio:.2f}")


if __name__ == "__main__":
    main()
