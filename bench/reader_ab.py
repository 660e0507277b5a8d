#!/usr/bin/python3
"""The reader alone, two builds against each other: samples/s of one shuffled epoch read in
process through _gantry.DataReader.next_batch (batches of --batch, 64, every sample's bytes
copied into one block, as StreamingDataset(batched=True) packs them for a DataLoader worker),
for the same samples (--count of --size bytes, 4 KiB) packed as WebDataset shards (--per-shard
samples each) and as MDS shards (--mds-shard-size), the shuffle window over every shard unless
--window says otherwise.

Each timed run is a fresh child process that imports one build's _gantry (so the two builds
never share a process, a page table or a heap), reads the epoch once untimed (checking that
every sample's payload arrived whole), then reports the best of --passes timed passes; the
builds alternate run by run (A B B A A B ...). Medians of --repeat runs per build and format,
and their ratio; beside them the CPU time of the whole process (the reader's thread and its
read-ahead's) per sample over the best pass, from the reader's creation to its end (the
dataset's opening excluded): what a change off the reader's own thread saves.

  bench/reader_ab.py --gantry build/default/apps/gantry/gantry \\
      --a BASE/build/default/python --b build/default/python [--repeat 6] [--window 8000]

--a and --b are folders holding a _gantry module (a default-preset build's python/ folder).
Used for docs/performance.md, "2026-12-04, later: prefetch hints for the next samples' records"
and "2026-12-04, 15:33: the read-ahead's planner, and metrics once per batch" (--window 8000,
the shuffle window of bench/data_loader.py's small set), and "2026-12-04, evening: packed
blocks of large samples copied on two threads" (also the large set's shape: --count 2000
--size 1048576 --per-shard 16 --mds-shard-size 17M --batch 4 --window 64).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["module"])
import _gantry
def epoch(check):
    source = _gantry.DataSource(spec["url"], map_files=True)
    n = sum(source.shard_samples)
    batch = spec["batch"]
    cpu = time.process_time()  # every thread's, to the nanosecond (os.times() ticks at 10 ms)
    reader = _gantry.DataReader(source, seed=1, shuffle=True, window=spec["window"], epoch=0,
                                world=1, rank=0, workers=0, worker=0, batch=batch, start=0,
                                read_ahead=4, zero_copy=False)
    got = payload = 0
    t = time.perf_counter()
    try:
        while True:
            _, keys, fields, (block, spans) = reader.next_batch(batch, True)
            got += len(keys)
            if check:  # the untimed pass: every sample's payload arrived whole
                m, sp = len(keys), memoryview(spans).cast("q")
                for c, (name, _) in enumerate(fields):
                    if name != "__key__":
                        payload += sum(sp[2 * (c * m + i) + 1] - sp[2 * (c * m + i)]
                                       for i in range(m))
    except StopIteration:
        pass
    dt = time.perf_counter() - t
    del reader  # its read-ahead's threads joined: their CPU time is counted
    cpu = time.process_time() - cpu
    if got != n or (check and payload != n * spec["size"]):
        raise SystemExit(f"read {got} samples, {payload} payload bytes; want {n}, "
                         f"{n * spec['size']}")
    return n / dt, cpu / n * 1e6
epoch(True)
print(*max(epoch(False) for _ in range(spec["passes"])))
"""


def make_data(root, gantry, count, size, per_shard, mds_shard):
    files = os.path.join(root, "files")
    os.makedirs(files)
    block = os.urandom(size + 4096)
    for i in range(count):
        with open(os.path.join(files, f"s{i:07d}.bin"), "wb") as f:
            f.write(block[i % 4096:i % 4096 + size])
    urls = {}
    for fmt, extra in (("wds", ["--samples-per-shard", str(per_shard)]),
                       ("mds", ["--shard-size", mds_shard])):
        out = os.path.join(root, fmt)
        subprocess.run([gantry, "data", "pack", files, out, "--format", fmt] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        urls[fmt] = out
    return urls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gantry", default="build/default/apps/gantry/gantry", help="the CLI (packs)")
    ap.add_argument("--a", required=True, help="folder with the baseline build's _gantry module")
    ap.add_argument("--b", required=True, help="folder with the build measured against it")
    ap.add_argument("--count", type=int, default=160000, help="samples")
    ap.add_argument("--size", type=int, default=4096, help="bytes per sample")
    ap.add_argument("--batch", type=int, default=64, help="samples per next_batch")
    ap.add_argument("--per-shard", type=int, default=2000,
                    help="samples per WebDataset shard")
    ap.add_argument("--mds-shard-size", default="9M", help="MDS shards' size limit")
    ap.add_argument("--repeat", type=int, default=6, help="runs per build and format")
    ap.add_argument("--passes", type=int, default=3, help="timed passes per run (best kept)")
    ap.add_argument("--window", type=int, default=1 << 40,
                    help="shuffle window in samples (default: over every shard)")
    ap.add_argument("--dir", default=None, help="where to write the data (default: temp)")
    args = ap.parse_args()
    for m in (args.a, args.b):
        if not any(n.startswith("_gantry") for n in os.listdir(m)):
            ap.error(f"{m} holds no _gantry module")
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        urls = make_data(root, args.gantry, args.count, args.size, args.per_shard,
                         args.mds_shard_size)
        results = {}
        for fmt, url in urls.items():
            runs = {"a": [], "b": []}
            cpu = {"a": [], "b": []}
            for rep in range(args.repeat):
                for which in ("ab" if rep % 2 == 0 else "ba"):
                    spec = {"module": os.path.abspath(getattr(args, which)), "url": url,
                            "size": args.size, "passes": args.passes, "window": args.window,
                            "batch": args.batch}
                    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)],
                                         check=True, capture_output=True, text=True).stdout
                    rate, us = out.split()[-2:]
                    runs[which].append(float(rate))
                    cpu[which].append(float(us))
            a, b = statistics.median(runs["a"]), statistics.median(runs["b"])
            ca, cb = statistics.median(cpu["a"]), statistics.median(cpu["b"])
            results[fmt] = {"a": runs["a"], "b": runs["b"], "ratio": b / a,
                            "cpu_us_per_sample_a": cpu["a"], "cpu_us_per_sample_b": cpu["b"]}
            print(f"{fmt}: a {a:,.0f} samples/s, b {b:,.0f}, b / a {b / a:.2f}  "
                  f"(a: {', '.join(f'{x:,.0f}' for x in runs['a'])}; "
                  f"b: {', '.join(f'{x:,.0f}' for x in runs['b'])}); CPU per sample, all "
                  f"threads: a {ca:.3f} us, b {cb:.3f} us, b / a {cb / ca:.2f}", flush=True)
        print(json.dumps(results))


if __name__ == "__main__":
    main()
