"""Several ranks, each its own process, save RowShards of the same tensors into one root (they
share nothing else); the checkpoint commits only once all have saved; loads reshard 4->2 and
4->8. On a posix root here; test_s3.py runs the same tests on S3."""

import json
import os
import random
import subprocess
import sys
import time
import unittest

import numpy as np
import torch

import gantry.checkpoint as ckpt
from sharded_state import SHARDED, global_tensors, shard_into
from util import TESTS_DIR, TempDirTestCase, child_env, split_rows

WORLD = 4
JOB = "multi"
PROCESS_TIMEOUT = 90


def equal(a, b):
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a.dtype == b.dtype and torch.equal(a, b)


class MultiRankMixin:
    """Test bodies shared by the posix and S3 variants; subclasses set root and options."""

    root = None
    options = {}

    def checkpointer(self, rank=0, world_size=1):
        return ckpt.Checkpointer(self.root, job=JOB, rank=rank, world_size=world_size,
                                 **self.options)

    def start_rank(self, rank, step=1):
        options = dict(self.options, chunk_size=16 << 10, commit_timeout_ms=60000)
        cmd = [sys.executable, os.path.join(TESTS_DIR, "rank_worker.py"), "--root", self.root,
               "--job", JOB, "--rank", str(rank), "--world-size", str(WORLD), "--step",
               str(step), "--options", json.dumps(options)]
        return subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def finish(self, procs):
        for rank, p in procs.items():
            try:
                out, err = p.communicate(timeout=PROCESS_TIMEOUT)
            except subprocess.TimeoutExpired:
                for q in procs.values():
                    q.kill()
                self.fail(f"rank {rank} did not finish in {PROCESS_TIMEOUT} s")
            self.assertEqual(p.returncode, 0, f"rank {rank} failed:\n{out}\n{err}")

    def save_all_ranks(self, step=1):
        self.finish({r: self.start_rank(r, step) for r in range(WORLD)})

    def test_commit_waits_for_every_rank_then_reshards(self):
        # Ranks 0-2 save; the checkpoint must not commit without rank 3.
        procs = {r: self.start_rank(r) for r in range(WORLD - 1)}
        try:
            with self.checkpointer() as c:
                deadline = time.monotonic() + PROCESS_TIMEOUT
                while True:
                    infos = [i for i in c.list() if i["step"] == 1]
                    if infos and infos[0]["parts"] == WORLD - 1:
                        break
                    for r, p in procs.items():
                        if p.poll() is not None:
                            out, err = p.communicate()
                            self.fail(f"rank {r} exited early:\n{out}\n{err}")
                    self.assertLess(time.monotonic(), deadline, "ranks 0-2 never saved")
                    time.sleep(0.05)
                time.sleep(0.5)  # give a wrong early commit the chance to show
                infos = [i for i in c.list() if i["step"] == 1]
                self.assertFalse(infos[0]["committed"], infos)
                self.assertIsNone(c.latest_step())
                for r, p in procs.items():
                    if p.poll() is not None:
                        out, err = p.communicate()
                        self.fail(f"rank {r} finished before rank 3 saved:\n{out}\n{err}")
            procs[WORLD - 1] = self.start_rank(WORLD - 1)
            self.finish(procs)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                p.communicate()  # reaps it and closes its pipes

        full = global_tensors()
        with self.checkpointer() as c:
            self.assertEqual(c.latest_step(), 1)
            m = c.manifest(1)
            self.assertEqual(m.world_size, WORLD)
            self.assertEqual(len(m.tensors["model/big"]["slices"]), WORLD)
            # Without `into`: whole tensors, assembled from the four slices.
            whole = c.load(1)
            self.assertEqual(whole["step"], 1)
            self.assertEqual(whole["rank"], 0)  # rank 0's plain values
            for name, t in full.items():
                self.assertTrue(equal(whole["model"][name], t), name)

        for world_size in (2, 8):
            seen_rank_values = set()
            for rank in range(world_size):
                with self.checkpointer(rank, world_size) as c:
                    into = shard_into(rank, world_size)
                    out = c.load(1, into=into)
                    self.assertIs(out, into)
                    seen_rank_values.add(out["rank"])
                    for name in list(SHARDED) + ["np"]:
                        off, rows = split_rows(full[name].shape[0], world_size, rank)
                        got = into["model"][name].tensor
                        self.assertTrue(equal(got, full[name][off:off + rows]),
                                        f"{name} rank {rank} of {world_size}")
                    self.assertTrue(equal(into["model"]["bias"], full["bias"]))
            # Ranks the checkpoint had see their own plain values; new ranks see rank 0's.
            self.assertEqual(seen_rank_values, set(range(min(world_size, WORLD))))

    def test_random_row_ranges(self):
        self.save_all_ranks(step=2)
        full = global_tensors()
        rng = random.Random(11)
        with self.checkpointer() as c:
            self.assertEqual(c.steps(), [2])
            for _ in range(10):
                g = full["big"].shape[0]
                off = rng.randrange(g)
                rows = rng.randrange(g - off + 1)
                buf = torch.empty(rows, full["big"].shape[1])
                # Only "big" is asked for in place; the rest comes back whole beside it.
                out = c.load(2, into={"model": {"big": ckpt.RowShard(buf, off, g)}})
                self.assertTrue(equal(out["model"]["emb"], full["emb"]))
                self.assertTrue(torch.equal(buf, full["big"][off:off + rows]), (off, rows))


class PosixMultiRankTest(MultiRankMixin, TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.root = self.path("root")


if __name__ == "__main__":
    unittest.main()
