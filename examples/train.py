#!/usr/bin/python3
"""A small deterministic CPU training loop that checkpoints with Gantry and resumes after a crash.

    PYTHONPATH=python:build/default/python /usr/bin/python3 examples/train.py \
        --root /tmp/run1 --steps 60 --every 5 --out /tmp/run1-final.pt

An MLP with dropout learns a fixed random linear map from synthetic data. Every --every steps it
saves the model, the Adam state, the step and the global RNG state (which drives dropout)
asynchronously: training continues while the checkpoint is written. On start it resumes from the
latest committed checkpoint under --root, if there is one, so a run killed at any instant and
started again with the same command ends with the same parameters, bit for bit, as a run never
interrupted. At the end it writes the final parameters with torch.save to --out.

Output lines (stdout): "resumed from step S" or "starting fresh", "step N loss L" per step,
"committed step N" once a checkpoint is committed, "done" at the end.
"""

import argparse
import sys
import time

import torch

import gantry.checkpoint as ckpt

IN, HIDDEN, OUT, BATCH = 32, 64, 8, 64


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, OUT))


def batch(seed, step):
    """The batch of `step`: a function of (seed, step) only, so a resumed run sees the same
    data as an uninterrupted one without saving a data loader's position."""
    truth = torch.Generator().manual_seed(seed)
    w = torch.randn(IN, OUT, generator=truth)
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(BATCH, IN, generator=g)
    y = x @ w + 0.01 * torch.randn(BATCH, OUT, generator=g)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True, help="checkpoint root (a path or s3:// URL)")
    p.add_argument("--job", default="train")
    p.add_argument("--local", default="", help="node-local checkpoint tier (optional)")
    p.add_argument("--steps", type=int, default=60)
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

    checkpointer = ckpt.Checkpointer(args.root, local=args.local, job=args.job)
    start = 1
    latest = checkpointer.latest_step()
    if latest is None:
        print("starting fresh", flush=True)
    else:
        state = checkpointer.load(latest)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        torch.set_rng_state(state["rng"])
        start = state["step"] + 1
        print(f"resumed from step {state['step']}", flush=True)

    pending = []

    def report_committed():
        while pending and pending[0].done():
            handle = pending.pop(0)
            handle.wait()  # raises if the save failed
            print(f"committed step {handle.step}", flush=True)

    model.train()
    for step in range(start, args.steps + 1):
        x, y = batch(args.seed, step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step % args.every == 0:
            state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
                     "rng": torch.get_rng_state()}
            # Returns once the tensors are copied; the writes overlap the next steps.
            pending.append(checkpointer.save(state, step))
        report_committed()
        if args.step_delay:
            time.sleep(args.step_delay)

    checkpointer.wait_all()
    report_committed()
    checkpointer.close()
    torch.save(model.state_dict(), args.out)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
