#!/usr/bin/python3
"""A checkpoint of many tiny tensors: files and bytes on disk, peak RSS and wall time.

Saves a state of N float32 tensors of 4 elements each (default 100,000: 1.6 MB of data) with
gantry.checkpoint into a file:// root in a temp directory, waits for the commit, then loads it
back and compares it with what was saved. Prints one JSON object: chunk files and bytes under
the root (as `du` counts them, blocks included; chunks and manifests apart), the save's and the restore's wall time, and
the process's peak RSS after each (ru_maxrss, so the restore's number includes the save's).

Usage (docs/performance.md "Checkpoint: many small tensors" records a run):
  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/ckpt_small_tensors.py
  ... --tensors 10000 --elems 4   a quick run
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import gantry.checkpoint as gckpt


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensors", type=int, default=100_000, help="tensors (default 100000)")
    ap.add_argument("--elems", type=int, default=4, help="float32 elements each (default 4)")
    ap.add_argument("--dir", default=None, help="root's parent (default: a temp dir)")
    args = ap.parse_args()

    base = args.dir or tempfile.mkdtemp(prefix="gantry-small-tensors-")
    root = os.path.join(base, "root")
    try:
        gen = torch.Generator().manual_seed(1)
        state = {f"t{i:06d}": torch.rand(args.elems, generator=gen) for i in range(args.tensors)}
        data_bytes = sum(t.numel() * t.element_size() for t in state.values())
        rss_before = peak_rss_mib()

        ck = gckpt.Checkpointer(root, job="small")
        t0 = time.perf_counter()
        ck.save(state, 1).wait()
        save_s = time.perf_counter() - t0
        rss_save = peak_rss_mib()

        chunk_files = 0
        for _, _, files in os.walk(os.path.join(root, "chunks")):
            chunk_files += len(files)
        def du(path):
            return int(subprocess.run(["du", "-s", "--block-size=1", path], check=True,
                                      capture_output=True, text=True).stdout.split()[0])
        ck.close()

        ck = gckpt.Checkpointer(root, job="small")
        t0 = time.perf_counter()
        back = ck.load(1)
        restore_s = time.perf_counter() - t0
        rss_restore = peak_rss_mib()
        ck.close()
        assert back.keys() == state.keys()
        assert all(torch.equal(back[k], state[k]) for k in state), "restore differs"

        print(json.dumps({
            "tensors": args.tensors,
            "data_bytes": data_bytes,
            "chunk_files": chunk_files,
            "du_bytes": du(root),
            "du_chunks_bytes": du(os.path.join(root, "chunks")),
            "du_manifests_bytes": du(os.path.join(root, "ckpt")),
            "save_seconds": round(save_s, 2),
            "restore_seconds": round(restore_s, 2),
            "peak_rss_mib_before": round(rss_before),
            "peak_rss_mib_after_save": round(rss_save),
            "peak_rss_mib_after_restore": round(rss_restore),
        }, indent=1))
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
