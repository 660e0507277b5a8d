"""Reads every sample of a dataset through the node-local shard cache and prints what came from
where: the job half of examples/staged_job.sbatch.

    python3 examples/read_dataset.py s3://bkt/train --cache-dir /nvme/gantry-data

Prints, before reading, how many shards the node's cache already holds for the dataset (gantryd
staged them there while the job waited), then one line `stats {...}` with the loader's counts:
bytes_cache, bytes_durable, ... (gantry.data.StreamingDataset.stats()).
"""

import argparse
import json
import os

from gantry.data import StreamingDataset


def cached_shards(cache_dir, url):
    """Shard files in the cache folder of `url` (docs/data.md, "Node-local shard cache")."""
    if not os.path.isdir(cache_dir):
        return 0
    count = 0
    for entry in os.listdir(cache_dir):
        folder = os.path.join(cache_dir, entry)
        try:
            with open(os.path.join(folder, "URL")) as f:
                if f.read().strip() != url:
                    continue
        except OSError:
            continue
        count += sum(1 for name in os.listdir(folder) if not name.startswith(".")
                     and name != "URL")
    return count


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url", help="the dataset, exactly as the batch script's #GANTRY --dataset names it")
    p.add_argument("--cache-dir", required=True, help="this node's shard cache")
    args = p.parse_args()
    print(f"node {os.environ.get('SLURMD_NODENAME', '-')}", flush=True)
    print(f"cached before reading: {cached_shards(args.cache_dir, args.url)} shards", flush=True)
    ds = StreamingDataset(args.url, cache_dir=args.cache_dir, shuffle=False)
    samples = sum(1 for _ in ds)
    stats = ds.stats()
    stats["samples_read"] = samples
    print("stats " + json.dumps(stats, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
