"""End to end on the live Slurm cluster (scripts/slurm): examples/train.py submitted with plain
sbatch to the Gantry-managed partition, placed by gantryd, checkpointing with gantry.checkpoint
to its node's local tier (served to peers by that node's gantry-agent) and to a durable root.
Its node is set DOWN mid-run: Slurm requeues the job, gantryd places it on another node, and the
job resumes from its last checkpoint read from the peer's agent (its new node's tier is empty)
and ends with the same parameters, bit for bit, as a run never interrupted.

Needs SLURM_CONF and GANTRY_SLURM_DIR of a running cluster (scripts/test provides one; skipped
otherwise, failed when GANTRY_SLURM_REQUIRED is set)."""

import faulthandler
import os
import re
import subprocess
import sys
import unittest

import torch

from slurm_util import (PARTITION, PATIENCE, SlurmTestCase, eventually, final_sacct, job_state,
                        run, slurm_env)
from util import SOURCE_DIR, child_env

TRAIN = os.path.join(SOURCE_DIR, "examples", "train.py")
# The same run on both sides: only --step-delay (a sleep per step) differs, which changes no
# number -- it leaves the test time to set the node down between checkpoints.
TRAIN_ARGS = ["--samples", "480", "--epochs", "2", "--every", "5", "--workers", "1"]


@unittest.skipUnless(slurm_env(), "no Slurm cluster (source \"$(scripts/slurm start)\")")
class SlurmTrainTest(SlurmTestCase):

    def setUp(self):
        super().setUp()
        faulthandler.dump_traceback_later(3 * PATIENCE + 300, exit=True)  # two runs of train.py
        self.down = None

    def tearDown(self):
        if self.down:
            # Back in service for the tests after this one on the same cluster.
            run(["scontrol", "update", f"NodeName={self.down}", "State=RESUME"], check=False)
            eventually(f"{self.down} idle again", lambda: run(
                ["sinfo", "-h", "-n", self.down, "-o", "%T"], check=False).strip() == "idle", 60)
        super().tearDown()

    def test_node_down_mid_run_resumes_from_a_peer_and_ends_bit_identical(self):
        # The run never interrupted, packing the dataset both runs read.
        r = subprocess.run([sys.executable, TRAIN, "--root", self.path("base-root"),
                            "--data-dir", self.path("data"), "--out", self.path("base.pt")] +
                           TRAIN_ARGS, env=child_env(), capture_output=True, text=True,
                           timeout=600, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)

        # Each node's local tier, served by its gantry-agent.
        token = self.path("agent-token")
        with open(token, "w") as f:
            f.write("agent-secret\n")
        agents = self.spawn_agents(token)
        self.assertGreaterEqual(len(agents), 2, agents)
        peers = list(agents.values())

        # gantryd over the cluster, as a site runs it.
        with open(self.path("tokens"), "w") as f:
            f.write("physics phys-token\nbiology bio-token\n")
        self.spawn_gantryd(["--tokens", self.path("tokens")])

        # The job, with plain sbatch: the node-local tier is the node it lands on.
        out = self.path("job.out")
        wrap = (f"echo node $SLURMD_NODENAME; exec {sys.executable} {TRAIN} "
                f"--root {self.path('durable')} --local {self.path('local')}/$SLURMD_NODENAME "
                f"--resume --data {self.path('data', 'wds')} --out {self.path('final.pt')} "
                f"--step-delay 0.15 " + " ".join(TRAIN_ARGS))
        env = child_env(GANTRY_CKPT_PEERS=",".join(peers), GANTRY_AGENT_TOKEN="agent-secret")
        job = subprocess.run(
            ["sbatch", "--parsable", "-p", PARTITION,
             "-A", "physics", "-N", "1", "--gres=gpu:h100:1", "-t", "10", "--requeue",
             "--open-mode=append", "-o", out, "--export=ALL", "--wrap", wrap],
            env=env, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
        try:
            def read_out():
                try:
                    with open(out) as f:
                        return f.read()
                except FileNotFoundError:
                    return ""

            # A few checkpoints committed, then its node goes down under it.
            eventually("a checkpoint committed",
                       lambda: re.search(r"^committed step (1\d|[2-9]\d)$", read_out(), re.M))
            first = re.search(r"^node (\S+)$", read_out(), re.M).group(1)
            self.down = first
            run(["scontrol", "update", f"NodeName={first}", "State=DOWN",
                 "Reason=gantry-train-test"])
            eventually("the job requeued and ended", lambda: job_state(job)[0] == "",
                       PATIENCE * 2)
        finally:
            run(["scancel", job], check=False)
        text = read_out()
        sacct = final_sacct(job, "State,NodeList")
        self.assertIn("COMPLETED", sacct, text[-3000:] + "\n" + sacct)
        ran_on = re.findall(r"^node (\S+)$", text, re.M)
        self.assertEqual(len(ran_on), 2, text[-3000:])
        self.assertNotEqual(ran_on[1], first, text[-3000:])
        resumed = re.search(r"^resumed from step (\d+) .*; chunks from local (\d+), peers (\d+), "
                            r"durable (\d+)$", text, re.M)
        self.assertIsNotNone(resumed, text[-3000:])
        self.assertGreaterEqual(int(resumed.group(1)), 10)
        self.assertEqual(int(resumed.group(2)), 0, "the new node's tier was empty")
        self.assertGreater(int(resumed.group(3)), 0, "no chunk came from the peer's agent")
        self.assertIn("done", text.splitlines())

        base = torch.load(self.path("base.pt"))
        final = torch.load(self.path("final.pt"))
        self.assertEqual(sorted(base), sorted(final))
        for name in base:
            self.assertTrue(torch.equal(base[name], final[name]), name)


if __name__ == "__main__":
    unittest.main()
