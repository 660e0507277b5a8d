#!/usr/bin/python3
"""Where bench/data_loader.py's consumer stall goes: the same loop (a step of sleep at
--load x a full-speed pass of the same loader just before it, the small or large set's shards
--times (10) times over as one epoch), with every next() timed. Prints, per run, the loop's
achieved rate against the asked one, how late its steps woke on average (a CPU and the GIL
waited for after the sleep; the loop sleeps that much less, so it is not in the stall), the
stall share after the first shard, the milliseconds of it in the first 0.1 s (the pipeline's
start), next()'s median, 90th percentile and mean wall time over the calls that took
under 0.1 ms (an item was already there), the loop thread's CPU time in those calls, and the
stall summed by tenth of the shuffle window the batch fell in (window boundaries at 0.0).

  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/data_stall_probe.py \\
      [--set small|large] [--kind gantrybp] [--runs 3] [--prefetch 32] [--chunk 1] [--rate R] \\
      [--times 10]

--rate R runs the loop at R samples/s in every run instead, so that two loaders (e.g. gantrybp
and gantrybp_pipe) are compared under the same loop.

--times N reads the set's shards N times over as one epoch (hard links): a longer loop, whose
share shows how much of the stall is the pipeline's start, a fixed time whatever the loop's length.

--chunk N (gantrybp only) hands the Prefetcher's batches over N at a time
(gantry.data.Prefetcher(chunk=N)) instead of prefetch()'s one. docs/performance.md,
"2026-12-05, morning: where the small set's stall goes", records a run.
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_loader as bench  # noqa: E402 -- the benchmark's data sets, loaders and loop

from gantry.data import Prefetcher  # noqa: E402


def probe(ds, args, batch, window, rate):
    if args.kind == "gantrybp" and args.chunk > 1:
        loader = Prefetcher(bench.make_loader("gantryb", ds, ds.shards_dir, args, batch, window),
                            depth=args.prefetch, chunk=args.chunk)
    else:
        loader = bench.make_loader(args.kind, ds, ds.shards_dir, args, batch, window)
    step = bench.TrainingStep(batch / rate)
    it = iter(loader)
    consumed = 0
    calls = []  # (samples consumed before the call, wall s, loop thread's CPU s, end)
    start = None
    while True:
        # The CPU clock is read outside the timed interval: time.thread_time() is a system call,
        # 1.6 us on this VM, which counted as stall until 2026-12-05 night.
        c = time.thread_time()
        t = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        cpu = time.thread_time()
        if start is not None:
            calls.append((consumed, now - t, cpu - c, now))
        consumed += len(b["__key__"])
        if start is None and consumed >= ds.per_shard:
            start, consumed_at_start = now, consumed
        step()
    loop = time.perf_counter() - start
    if consumed != ds.count:
        raise SystemExit(f"consumed {consumed} of {ds.count}")
    quick = [(w, c) for _, w, c, _ in calls if w < 1e-4]
    walls = sorted(w for w, _ in quick)
    by_phase = collections.Counter()
    for at, w, _, _ in calls:
        by_phase[int(10 * (at % window) / window)] += w
    stalled = sum(w for _, w, _, _ in calls)
    early = sum(w for _, w, _, end in calls if end - start < 0.1)
    achieved = (consumed - consumed_at_start) / loop
    print(f"| {rate:,.0f} | {achieved / rate:.3f} | {1e6 * step.mean_late():.0f} "
          f"| {100 * stalled / loop:.2f}% | {1e3 * early:.1f} "
          f"| {1e6 * statistics.median(walls):.1f} "
          f"| {1e6 * walls[int(0.9 * len(walls))]:.1f} | {1e6 * sum(walls) / len(walls):.1f} "
          f"| {1e6 * sum(c for _, c in quick) / len(quick):.1f} "
          f"| {' '.join(f'{1e3 * by_phase[k]:.0f}' for k in range(10))} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gantry", default="build/default/apps/gantry/gantry")
    ap.add_argument("--set", choices=("small", "large"), default="small")
    ap.add_argument("--kind", default="gantrybp", help="a loader of bench/data_loader.py")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--rate", type=float, default=None,
                    help="the loop's samples/s, the same for every run and loader (default: "
                         "--load times the rate of a full-speed pass just before each run)")
    ap.add_argument("--prefetch", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--times", type=int, default=10,
                    help="the set's shards this many times over as one epoch")
    args = ap.parse_args()
    if args.times < 1 or args.runs < 1:
        ap.error("--times and --runs must be at least 1")
    args.mmap = None
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="gantry-stall-probe-") as tmp:
        if args.set == "small":
            one = bench.DataSet(tmp, "small", 40000, 4096, 2000, args.gantry, 1)
            batch, window = 64, 4 * 2000
        else:
            one = bench.DataSet(tmp, "large", 320, 1 << 20, 16, args.gantry, 2)
            batch, window = 4, 4 * 16
        ds = one.repeated(args.times)
        print(f"{args.set} set x{args.times}, {args.kind}, prefetch {args.prefetch}, "
              f"chunk {args.chunk}\n")
        print("| loop's rate | achieved / asked | step late, us | stall share "
              "| of it in the first 0.1 s, ms | next() median us | p90 us | mean us | CPU us "
              "| stalled ms by tenth of the window |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for _ in range(args.runs):
            if args.rate is not None:
                probe(ds, args, batch, window, args.rate)
                continue
            dt, _ = bench.timed_read(args.kind, ds, args, batch, window)
            probe(ds, args, batch, window, args.load * ds.count / dt)


if __name__ == "__main__":
    main()
