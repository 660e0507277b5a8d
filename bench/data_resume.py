#!/usr/bin/python3
"""Resume latency of gantry.data.StreamingDataset at sample 10 million, end to end.

Writes an MDS dataset of 2,000 shards x 5,500 samples (11M samples; one "int" column holding the
sample's number in dataset order: 8 bytes a sample, ~130 MB) into a temp directory, then times,
each in a fresh dataset object as a restarted job would:
  - open: StreamingDataset(url) (reads index.json),
  - resume: load_state_dict({... "consumed": 10_000_000 ...}) and next(iter(ds)): the first
    sample after the resume, its shard fetched and parsed;
  - the same at sample 0, for comparison;
  - the first batch through a DataLoader with --workers worker processes (default 2), from a
    fresh dataset object: what a restarted training loop waits for (worker start included);
  - skipping: reading the epoch from the start up to --skip samples, the way a loader without
    random access resumes (the ModernBERT issue's 14.5 h); rate and the time 10M would take at it.
It also checks the resumed sample is the one the uninterrupted order has at 10M (computed from
the same reader without skipping: the sample's value names its position in dataset order).

Usage (docs/performance.md "Data order: resume at sample 10 million" records a run):
  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/data_resume.py
  ... --skip 200000   a quicker skipping baseline
"""

import argparse
import json
import os
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.utils.data

from gantry.data import StreamingDataset


def write_mds(folder, shards, per_shard):
    config = json.dumps({"column_encodings": ["int"], "column_names": ["v"], "column_sizes": [8],
                         "compression": None, "format": "mds", "hashes": [],
                         "size_limit": 1 << 26, "version": 2}).encode()
    entries = []
    header = 4 + 4 * (per_shard + 1) + len(config)
    offsets = (header + 8 * np.arange(per_shard + 1, dtype=np.uint32)).astype("<u4")
    for s in range(shards):
        name = f"shard.{s:05d}.mds"
        values = (s * per_shard + np.arange(per_shard, dtype=np.int64)).astype("<i8")
        body = struct.pack("<I", per_shard) + offsets.tobytes() + config + values.tobytes()
        with open(os.path.join(folder, name), "wb") as f:
            f.write(body)
        entries.append({"column_encodings": ["int"], "column_names": ["v"], "column_sizes": [8],
                        "compression": None, "format": "mds", "hashes": [],
                        "raw_data": {"basename": name, "bytes": len(body), "hashes": {}},
                        "samples": per_shard, "size_limit": 1 << 26, "version": 2,
                        "zip_data": None})
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"version": 2, "shards": entries}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=2000)
    ap.add_argument("--per-shard", type=int, default=5500)
    ap.add_argument("--at", type=int, default=10_000_000, help="resume point (default 10M)")
    ap.add_argument("--skip", type=int, default=1_000_000,
                    help="samples the skipping baseline reads (default 1M)")
    ap.add_argument("--window", type=int, default=1 << 18)
    ap.add_argument("--workers", type=int, default=2,
                    help="DataLoader workers of the first-batch-through-a-DataLoader measure")
    ap.add_argument("--dir", default=None, help="where to write the dataset (default: temp)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="gantry-resume-", dir=args.dir) as tmp:
        t = time.perf_counter()
        write_mds(tmp, args.shards, args.per_shard)
        write_s = time.perf_counter() - t
        total = args.shards * args.per_shard
        kw = dict(seed=17, window=args.window, batch_size=8, rank=3, world_size=8)

        def resume(at):
            t0 = time.perf_counter()
            ds = StreamingDataset(tmp, **kw)
            t1 = time.perf_counter()
            ds.load_state_dict({"seed": 17, "shuffle": True, "window": args.window, "epoch": 2,
                                "consumed": at, "samples": total})
            first = next(iter(ds))
            t2 = time.perf_counter()
            return first, t1 - t0, t2 - t1

        resume(0)  # warm the page cache for index.json, as a restarted job's node would have
        first0, open0, resume0 = resume(0)
        first, open_s, resume_s = resume(args.at)

        # The uninterrupted order's sample at `at` for rank 3 of 8 (batch 8): position at + 24.
        one = StreamingDataset(tmp, seed=17, window=args.window, rank=0, world_size=1)
        one.load_state_dict({"seed": 17, "shuffle": True, "window": args.window, "epoch": 2,
                             "consumed": args.at + 3 * 8, "samples": total})
        want = next(iter(one))
        if first["v"] != want["v"]:
            sys.exit(f"resumed sample {first['v']} is not the uninterrupted order's {want['v']}")

        # The same through a DataLoader with worker processes, as a training job reads: from a
        # fresh dataset object to the first batch in this process (the workers' start included).
        def resume_loader(at):
            t0 = time.perf_counter()
            ds = StreamingDataset(tmp, **kw)
            ds.load_state_dict({"seed": 17, "shuffle": True, "window": args.window, "epoch": 2,
                                "consumed": at, "samples": total})
            loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=args.workers)
            batch = next(iter(loader))
            return batch, time.perf_counter() - t0

        batch, loader_s = resume_loader(args.at)
        if int(batch["v"][0]) != want["v"]:
            sys.exit(f"DataLoader: resumed sample {int(batch['v'][0])} is not {want['v']}")
        _, loader0_s = resume_loader(0)

        ds = StreamingDataset(tmp, **kw)
        ds.set_epoch(2)
        t = time.perf_counter()
        n = 0
        for _ in ds:
            n += 1
            if n >= args.skip:
                break
        skip_s = time.perf_counter() - t
        rate = n / skip_s

    print(json.dumps({
        "samples": total, "shards": args.shards, "window": args.window, "write_s": round(write_s, 2),
        "resume_at": args.at,
        "open_s": round(open_s, 4), "first_sample_after_resume_s": round(resume_s, 4),
        "open_at_0_s": round(open0, 4), "first_sample_at_0_s": round(resume0, 4),
        "dataloader_workers": args.workers,
        "dataloader_first_batch_after_resume_s": round(loader_s, 4),
        "dataloader_first_batch_at_0_s": round(loader0_s, 4),
        "skip_samples": n, "skip_s": round(skip_s, 2), "skip_samples_per_s": round(rate),
        "skip_to_resume_point_estimated_s": round(args.at / 8 / rate, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
