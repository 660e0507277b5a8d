"""What the tests on the live Slurm cluster (scripts/slurm) share: finding the cluster, running
Slurm's commands, waiting with a deadline, and the processes a test spawns (agents, gantryd)."""

import os
import signal
import subprocess
import time

from util import TempDirTestCase

PATIENCE = 180  # seconds: a loaded 2-core CI machine starts torch slowly


def slurm_env():
    if os.environ.get("SLURM_CONF") and os.environ.get("GANTRY_SLURM_DIR"):
        return True
    if os.environ.get("GANTRY_SLURM_REQUIRED"):
        raise AssertionError("GANTRY_SLURM_REQUIRED is set but SLURM_CONF/GANTRY_SLURM_DIR are not")
    return False


def run(args, check=True):
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r.stdout


def eventually(what, pred, seconds=PATIENCE):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {seconds} s")


def job_state(job):
    """(state, node list) as squeue shows the job; ("", "") once it left the queue."""
    out = run(["squeue", "-h", "-j", job, "-o", "%T %N"], check=False).split()
    return (out[0], out[1] if len(out) > 1 else "") if out else ("", "")


class SlurmTestCase(TempDirTestCase):
    """A test that spawns daemons: each is stopped with SIGTERM at the end."""

    def setUp(self):
        super().setUp()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        super().tearDown()

    def spawn(self, args, log):
        with open(self.path(log), "w") as f:
            p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def port(self, name):
        def read():
            try:
                with open(self.path(name)) as f:
                    text = f.read()
                return int(text) if text.endswith("\n") else None
            except (FileNotFoundError, ValueError):
                return None
        return eventually(f"{name} written", read, 30)
