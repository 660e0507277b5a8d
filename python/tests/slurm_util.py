"""What the tests on the live Slurm cluster (scripts/slurm) share: finding the cluster, running
Slurm's commands, waiting with a deadline, and the processes a test spawns (agents, gantryd)."""

import os
import signal
import subprocess
import time

import _gantry
from util import TempDirTestCase

BUILD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(_gantry.__file__)))
PARTITION = os.environ.get("GANTRY_SLURM_PARTITION", "gantry")
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


# Job states sacct shows while slurmdbd has not yet recorded the job's end.
_UNFINISHED = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING")


def final_sacct(job, fields="State", seconds=60):
    """sacct's line for `job` (its last run, -X: the allocation only) once it records an end.
    slurmctld sends a job's end to slurmdbd after the job has left squeue, so a sacct asked at
    once can still say RUNNING on a loaded machine."""
    def ended():
        out = run(["sacct", "-D", "-X", "-n", "-P", "-j", job, f"--format={fields}"])
        last = out.strip().splitlines()[-1:] if out.strip() else []
        return out if last and last[0].split("|")[0].split()[0] not in _UNFINISHED else None
    return eventually(f"sacct records the end of job {job}", ended, seconds)


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

    def spawn_agents(self, token_file, extra=lambda node: []):
        """A gantry-agent per node of the partition, serving the node's local tier
        self.path("local", NODE), with `extra(node)` arguments; {node: its URL}."""
        urls = {}
        for node in sorted(set(run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N"]).split())):
            os.makedirs(self.path("local", node))
            self.spawn([os.path.join(BUILD_DIR, "apps/gantry-agent/gantry-agent"),
                        "--root", self.path("local", node), "--listen", "127.0.0.1:0",
                        "--port-file", self.path(f"agent-{node}.port"),
                        "--token-file", token_file] + extra(node), f"agent-{node}.log")
            urls[node] = f"http://127.0.0.1:{self.port(f'agent-{node}.port')}"
        return urls

    def spawn_gantryd(self, args):
        """gantryd over the cluster as a site runs it (its spec from `gantry cluster import
        --from-slurm`), cycling every 0.2 s, with `args`; its API port."""
        site = self.path("site.yaml")
        run([os.path.join(BUILD_DIR, "apps/gantry/gantry"), "cluster", "import", "--from-slurm",
             "-o", site])
        self.spawn([os.path.join(BUILD_DIR, "apps/gantryd/gantryd"), "--cluster", site,
                    "--state", self.path("state.db"), "--listen", "127.0.0.1:0",
                    "--port-file", self.path("gantryd.port"), "--interval", "0.2"] + args,
                   "gantryd.log")
        return self.port("gantryd.port")
