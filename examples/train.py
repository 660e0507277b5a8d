#!/usr/bin/python3
"""Trains a small PyTorch model from a packed dataset through gantry.data, checkpointing the model,
the optimizer and the loader's position with gantry.checkpoint, and resumes mid-epoch.

    PYTHONPATH=python:build/default/python /usr/bin/python3 examples/train.py \
        --root /tmp/run1 --out /tmp/run1-final.pt            # synthetic data, packed on the fly
    ... --resume                                              # after a crash: continue mid-epoch
    ... --data s3://bkt/train-wds                             # or a dataset packed earlier

The data: without --data, a synthetic regression dataset (an input vector x and a target y, one
.npy file each per sample, y a fixed random linear map of x plus noise) is written as files and
packed with `gantry data pack` (WebDataset shards by default, --format mds for MDS) into
--data-dir (default: a temp folder). It is a function of --seed only, so every run packs the same
bytes. gantry.data.StreamingDataset reads it in its seeded global order through a DataLoader with
--workers worker processes, whose batches a thread takes out of the workers' pipe --prefetch
batches ahead while the step runs (gantry.data.prefetch; 0: the loop does it itself).

Every --every steps the run saves {model, optimizer, loader state, step, RNG state}
asynchronously (training continues while it is written). The loader state is a few numbers
(epoch, seed, samples consumed: docs/data.md); resuming from it reads no sample of the prefix.
With --resume the run continues from the latest committed checkpoint under --root (or starts
fresh if there is none); without it, a --root that already holds checkpoints is an error. A run
killed at any instant and started again with --resume sees the same sample sequence and ends
with the same parameters, bit for bit, as a run never interrupted (python/tests/test_example.py).

Output lines (stdout): "starting fresh" or "resumed from step S epoch E consumed C of N; chunks
from local L, peers P, durable D" (where the restore read the checkpoint's chunks), then
per step "step N epoch E loss L keys K1,K2,..." (the batch's sample keys, in order),
"committed step N" once a checkpoint is committed, "done" at the end. The final parameters go to
--out with torch.save.
"""

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.utils.data

import gantry.checkpoint as ckpt
from gantry.data import StreamingDataset, prefetch

IN, HIDDEN, OUT = 32, 64, 8


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, OUT))


def find_gantry_cli(explicit):
    """The `gantry` CLI: --gantry, $GANTRY_CLI, `gantry` on PATH, or the one in the build tree
    the extension was loaded from (<build>/apps/gantry/gantry beside <build>/python)."""
    candidates = [explicit, os.environ.get("GANTRY_CLI"), shutil.which("gantry")]
    try:
        import _gantry  # the extension gantry.data already loaded
        build = os.path.dirname(os.path.dirname(os.path.abspath(_gantry.__file__)))
        candidates.append(os.path.join(build, "apps", "gantry", "gantry"))
    except ImportError:
        pass
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise SystemExit("train.py: the gantry CLI was not found (pass --gantry, set GANTRY_CLI, or "
                     "build it: cmake --build --preset default --target gantry)")


def write_synthetic(folder, samples, seed):
    """One sample per key: <key>.x.npy (float32[IN]) and <key>.y.npy (float32[OUT])."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((IN, OUT)).astype(np.float32)
    x = rng.standard_normal((samples, IN)).astype(np.float32)
    y = (x @ w + 0.01 * rng.standard_normal((samples, OUT))).astype(np.float32)
    os.makedirs(folder, exist_ok=True)
    for i in range(samples):
        np.save(os.path.join(folder, f"s{i:06d}.x.npy"), x[i])
        np.save(os.path.join(folder, f"s{i:06d}.y.npy"), y[i])


def to_arrays(sample):
    """The loader's transform: x.npy and y.npy as numpy arrays. WebDataset fields decode by
    extension already; an MDS column that `gantry data pack` wrote from .npy files has the
    encoding `bytes`, and MDS columns decode by encoding, so those still hold the .npy file."""
    for name in ("x.npy", "y.npy"):
        if isinstance(sample[name], bytes):
            sample[name] = np.load(io.BytesIO(sample[name]), allow_pickle=False)
    return sample


def pack_synthetic(args, data_dir):
    """Writes the synthetic files and packs them with `gantry data pack`; returns its URL."""
    files, packed = os.path.join(data_dir, "files"), os.path.join(data_dir, args.format)
    shutil.rmtree(files, ignore_errors=True)
    shutil.rmtree(packed, ignore_errors=True)
    write_synthetic(files, args.samples, args.seed)
    cmd = [find_gantry_cli(args.gantry), "data", "pack", files, packed, "--format", args.format]
    if args.format == "wds":
        cmd += ["--samples-per-shard", str(args.samples_per_shard)]
    else:
        # About --samples-per-shard samples per MDS shard (two .npy files of ~200 bytes each).
        cmd += ["--shard-size", str(args.samples_per_shard * 2 * (128 + 4 * max(IN, OUT)))]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(files)
    return packed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True, help="checkpoint root (a path or s3:// URL)")
    p.add_argument("--job", default="train")
    p.add_argument("--local", default="", help="node-local checkpoint tier (optional)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest committed checkpoint under --root, if any")
    p.add_argument("--data", default=None,
                   help="a packed dataset (path or URL) with x.npy and y.npy fields; default: "
                        "synthetic, packed into --data-dir")
    p.add_argument("--data-dir", default=None, help="where the synthetic dataset is packed "
                                                    "(default: a temp folder, removed at exit)")
    p.add_argument("--format", choices=("wds", "mds"), default="wds",
                   help="format of the synthetic dataset")
    p.add_argument("--samples", type=int, default=600, help="samples of the synthetic dataset")
    p.add_argument("--samples-per-shard", type=int, default=40)
    p.add_argument("--gantry", default=None, help="the gantry CLI (for packing)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--prefetch", type=int, default=4,
                   help="batches a thread takes from the DataLoader ahead of the step; 0: none")
    p.add_argument("--window", type=int, default=200, help="shuffle window, samples")
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--out", required=True, help="torch.save file of the final parameters")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="seconds to sleep per step (stands in for real work in tests)")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    tmp = None
    url = args.data
    if url is None:
        data_dir = args.data_dir
        if data_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="gantry-train-data-")
            data_dir = tmp.name
        url = pack_synthetic(args, data_dir)

    ds = StreamingDataset(url, batch_size=args.batch_size, seed=args.seed, window=args.window,
                          transform=to_arrays)
    # The DataLoader draws its workers' base seed from this generator, not from the global RNG
    # (which drives dropout): otherwise starting an iterator mid-epoch after a resume would
    # consume a global random number at another point than the uninterrupted run does.
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, num_workers=args.workers,
        generator=torch.Generator().manual_seed(args.seed))

    checkpointer = ckpt.Checkpointer(args.root, local=args.local, job=args.job)
    step = 0
    latest = checkpointer.latest_step()
    if latest is not None and not args.resume:
        raise SystemExit(f"train.py: {args.root} already holds checkpoints (latest step {latest});"
                         " pass --resume to continue from it, or use a fresh --root")
    if latest is None:
        print("starting fresh", flush=True)
    else:
        # Model and optimizer are Stateful: filled in place and loaded through load_state_dict().
        state = checkpointer.load(latest, into={"model": model, "optim": opt})
        torch.set_rng_state(state["rng"])
        ds.load_state_dict(state["loader"])
        step = state["step"]
        where = checkpointer.last_restore_stats or {}
        print(f"resumed from step {step} epoch {ds.epoch} consumed {state['loader']['consumed']} "
              f"of {ds.num_samples}; chunks from local {where.get('from_local', 0)}, peers "
              f"{where.get('from_peers', 0)}, durable {where.get('from_durable', 0)}", flush=True)

    pending = []

    def report_committed():
        while pending and pending[0].done():
            handle = pending.pop(0)
            handle.wait()  # raises if the save failed
            print(f"committed step {handle.step}", flush=True)

    model.train()
    for epoch in range(ds.epoch, args.epochs):
        ds.set_epoch(epoch)  # keeps a loaded mid-epoch position when it is this epoch
        taken = 0            # samples this epoch's iterator has handed to the loop
        for batch in prefetch(loader, args.prefetch) if args.prefetch else loader:
            step += 1
            taken += len(batch["__key__"])
            x, y = batch["x.npy"], batch["y.npy"]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            print(f"step {step} epoch {epoch} loss {loss.item():.6f} keys "
                  f"{','.join(batch['__key__'])}", flush=True)
            if step % args.every == 0:
                # The loader's position: what this loop consumed since the iterator began (its
                # workers run in other processes, so the dataset cannot count it itself).
                state = {"model": model, "optim": opt, "loader": ds.state_dict(num_samples=taken),
                         "step": step, "rng": torch.get_rng_state()}
                # Returns once the tensors are copied; the writes overlap the next steps.
                pending.append(checkpointer.save(state, step))
            report_committed()
            if args.step_delay:
                time.sleep(args.step_delay)

    checkpointer.wait_all()
    report_committed()
    checkpointer.close()
    torch.save(model.state_dict(), args.out)
    if tmp is not None:
        tmp.cleanup()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
