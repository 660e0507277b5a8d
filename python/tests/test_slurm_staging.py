"""End to end on the live Slurm cluster (scripts/slurm): a job whose batch script declares a
dataset (#GANTRY --dataset=URL) waits behind others; meanwhile gantryd asks the gantry-agent of
the node the reservation plan expects it on to stage the dataset into that node's shard cache,
and the job starts with every shard already there -- it reads nothing from the source. And a job
that declares its checkpoint (#GANTRY --checkpoint=URL) and is killed right after its last save
reached the node-local tier: when it ends, gantryd has that node's agent drain the save to the
root and commit it.

Needs SLURM_CONF and GANTRY_SLURM_DIR of a running cluster (scripts/test provides one; skipped
otherwise, failed when GANTRY_SLURM_REQUIRED is set)."""

import faulthandler
import json
import os
import re
import sqlite3
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

from slurm_util import (BUILD_DIR, PARTITION, PATIENCE, SlurmTestCase, eventually, final_sacct,
                        job_state, run, slurm_env)
from util import SOURCE_DIR, child_env

READER = os.path.join(SOURCE_DIR, "examples", "read_dataset.py")


@unittest.skipUnless(slurm_env(), "no Slurm cluster (source \"$(scripts/slurm start)\")")
class SlurmStagingTest(SlurmTestCase):

    def setUp(self):
        super().setUp()
        faulthandler.dump_traceback_later(3 * PATIENCE, exit=True)
        self.jobs = []

    def tearDown(self):
        for job in self.jobs:
            run(["scancel", job], check=False)
        for job in self.jobs:
            eventually(f"job {job} gone", lambda: job_state(job)[0] == "", 60)
        super().tearDown()

    def sbatch(self, args, script=None):
        cmd = ["sbatch", "--parsable", "-p", PARTITION, "--export=ALL"] + args
        if script is not None:
            cmd.append(script)
        job = subprocess.run(cmd, env=child_env(), capture_output=True, text=True,
                             check=True).stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def api(self, path):
        """The document at `path`, or None while gantryd has not seen the job (404)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.gantryd_port}{path}",
                                     headers={"Authorization": "Bearer op-secret"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def logs(self):
        """The end of every daemon's log, for a failure's message."""
        text = ""
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".log"):
                with open(self.path(name)) as f:
                    text += f"--- {name}\n" + "".join(f.readlines()[-15:])
        try:
            with sqlite3.connect(f"file:{self.path('state.db')}?mode=ro", uri=True) as db:
                rows = db.execute("SELECT time, job, kind, detail FROM events ORDER BY seq").fetchall()
            text += "--- gantryd's events\n" + "\n".join(" ".join(map(str, r)) for r in rows[-20:])
        except sqlite3.Error as e:
            text += f"--- gantryd's events: {e}"
        return text

    def test_declared_dataset_is_on_the_node_before_the_job_starts(self):
        # A dataset of 24 samples in MDS shards of ~16 KiB, on a "durable" file:// store.
        src = self.path("src")
        os.makedirs(src)
        for i in range(24):
            with open(os.path.join(src, f"s{i:03d}.bin"), "wb") as f:
                f.write(bytes([i]) * 6000)
        url = "file://" + self.path("dataset")
        run([os.path.join(BUILD_DIR, "apps/gantry/gantry"), "data", "pack", src, url,
             "--format", "mds", "--shard-size", "16K"])
        shards = len([n for n in os.listdir(self.path("dataset")) if n.endswith(".mds")])
        self.assertGreater(shards, 3)

        # Every node's agent, with its node's shard cache.
        with open(self.path("agent-token"), "w") as f:
            f.write("agent-secret\n")
        agents = self.spawn_agents(
            self.path("agent-token"),
            lambda node: ["--data-cache", self.path("cache", node), "--stage-allow", url])
        with open(self.path("op-token"), "w") as f:
            f.write("op-secret\n")
        self.gantryd_port = self.spawn_gantryd(
            ["--operator-token-file", self.path("op-token"),
             "--agent-token-file", self.path("agent-token"), "--data-wait", "120"] +
            [arg for node, u in agents.items() for arg in ("--agent", f"{node}={u}")])

        # Both H100 nodes busy for a while (time limit 1 minute, so the plan has an end).
        blockers = [self.sbatch(["-A", account, "-N", "1", "--gres=gpu:h100:8", "-t", "1",
                                 "-o", "/dev/null", "--wrap", "sleep 25"])
                    for account in ("physics", "biology")]
        for b in blockers:
            eventually(f"blocker {b} running", lambda: job_state(b)[0] == "RUNNING")

        # The job, declaring its dataset the way users do: in its batch script.
        script = self.path("job.sbatch")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n"
                    f"#GANTRY --dataset={url}\n"
                    f"exec {sys.executable} {READER} {url} "
                    f"--cache-dir {self.path('cache')}/$SLURMD_NODENAME\n")
        out = self.path("job.out")
        job = self.sbatch(["-A", "chemistry", "-N", "1", "--gres=gpu:h100:8", "-t", "5",
                           "-o", out], script)

        # While it waits, gantryd shows its dataset and stages it onto the planned node.
        seen = []

        def staged_while_pending():
            j = self.api(f"/v1/jobs/{job}")
            if j is None:
                return None
            seen.append(j)
            done = [s for s in j["staging"] if s["state"] == "done"]
            return j if j["phase"] == "pending" and done else None
        try:
            pending = eventually("staged ahead while pending", staged_while_pending)
        except AssertionError as e:
            raise AssertionError(f"{e}; gantryd last said {seen[-1:]}\n{self.logs()}") from None
        self.assertEqual(pending["datasets"], [url])
        planned = [s["node"] for s in pending["staging"] if s["state"] == "done"]
        self.assertTrue(set(planned) <= {"n1", "n2"}, pending["staging"])
        for s in pending["staging"]:
            if s["state"] == "done":
                self.assertGreater(s["bytes_total"], 0)
                self.assertEqual(s["bytes_done"], s["bytes_total"])

        # It runs once the blockers end, with every shard in its node's cache from the start.
        eventually("the job ran", lambda: job_state(job)[0] == "", PATIENCE)
        with open(out) as f:
            text = f.read()
        ran_on = re.search(r"^node (\S+)$", text, re.M)
        self.assertIsNotNone(ran_on, text)
        self.assertIn(ran_on.group(1), {"n1", "n2"})
        self.assertIn(f"cached before reading: {shards} shards", text)
        stats = json.loads(re.search(r"^stats (.*)$", text, re.M).group(1))
        self.assertEqual(stats["samples_read"], 24, stats)
        self.assertEqual(stats["bytes_durable"], 0, stats)
        self.assertEqual(stats["bytes_peer"], 0, stats)
        self.assertGreater(stats["bytes_cache"], 0, stats)
        sacct = final_sacct(job)
        self.assertIn("COMPLETED", sacct)

    def start_checkpoint_site(self, gantryd=True):
        """A durable root, every node's agent allowed to drain into it, and (unless not
        `gantryd`: start_gantryd_with) gantryd knowing the agents: (root directory, {node:
        agent URL})."""
        root = self.path("ckpt-root")
        os.makedirs(root)
        with open(self.path("agent-token"), "w") as f:
            f.write("agent-secret\n")
        agents = self.spawn_agents(self.path("agent-token"),
                                   lambda node: ["--stage-allow", f"file://{root}"])
        if gantryd:
            self.start_gantryd_with(agents)
        return root, agents

    def start_gantryd_with(self, agents):
        with open(self.path("op-token"), "w") as f:
            f.write("op-secret\n")
        self.gantryd_port = self.spawn_gantryd(
            ["--operator-token-file", self.path("op-token"),
             "--agent-token-file", self.path("agent-token")] +
            [arg for node, u in agents.items() for arg in ("--agent", f"{node}={u}")])

    def checkpoint_job(self, root, name, program):
        """A batch script declaring its checkpoint location ROOT/ckpt/NAME that runs
        `program` with the checkpoint environment set (its node's local tier under local/)."""
        script = self.path("job.sbatch")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n"
                    f"#GANTRY --checkpoint=file://{root}/ckpt/{name}\n"
                    f"export GANTRY_CKPT_ROOT=file://{root} GANTRY_CKPT_JOB={name}\n"
                    f"export GANTRY_CKPT_LOCAL={self.path('local')}/$SLURMD_NODENAME\n"
                    f"exec {sys.executable} {program}\n")
        return script

    def saver(self, last, restart=None):
        """A program that commits step 1, saves step 2 (256 MiB) to its node's local tier only,
        prints its node and runs `last`; on a requeued run (SLURM_RESTART_COUNT) it runs
        `restart` instead and exits."""
        path = self.path("saver.py")
        with open(path, "w") as f:
            f.write("import os, signal, numpy as np\n"
                    "from gantry import checkpoint\n"
                    "c = checkpoint.Checkpointer()\n"
                    "node = os.environ['SLURMD_NODENAME']\n")
            if restart is not None:
                f.write("if int(os.environ.get('SLURM_RESTART_COUNT', '0')) > 0:\n"
                        f"    {restart}"
                        "    raise SystemExit(0)\n")
            f.write("c.save({'w': np.zeros(16, np.float32)}, step=1).wait()\n"
                    "state = {'w': np.arange(64 << 20, dtype=np.float32)}\n"
                    "c.save(state, step=2, durability='local').wait()\n"
                    "print('node', node, flush=True)\n" + last)
        return path

    def test_a_save_cut_off_by_the_jobs_end_is_drained_and_committed(self):
        root, agents = self.start_checkpoint_site()

        # Step 1 is committed normally; step 2 (256 MiB) is killed -9 as soon as it is in the
        # node's local tier, long before its 64 chunks can have reached the root.
        saver = self.saver("os.kill(os.getpid(), signal.SIGKILL)\n")
        script = self.checkpoint_job(root, "run-7", saver)
        out = self.path("job.out")
        job = self.sbatch(["-A", "chemistry", "-N", "1", "--gres=gpu:h100:1", "-t", "5",
                           "-o", out], script)
        eventually("the job ended", lambda: job_state(job)[0] == "", PATIENCE)
        with open(out) as f:
            text = f.read()
        ran_on = re.search(r"^node (\S+)$", text, re.M)
        self.assertIsNotNone(ran_on, text + self.logs())
        node = ran_on.group(1)

        gantry = os.path.join(BUILD_DIR, "apps/gantry/gantry")

        def committed():
            ls = json.loads(run([gantry, "ckpt", "--root", root, "--job", "run-7", "ls",
                                 "--json"]))
            return [s["step"] for s in ls if s["committed"]]
        try:
            eventually("step 2 committed", lambda: committed() == [1, 2], PATIENCE)
        except AssertionError as e:
            raise AssertionError(f"{e}; committed: {committed()}\n{self.logs()}") from None
        # The node's agent committed it (the killed process did not): its drain wrote the part.
        req = urllib.request.Request(f"{agents[node]}/metrics",
                                     headers={"Authorization": "Bearer agent-secret"})
        with urllib.request.urlopen(req, timeout=10) as r:
            metrics = r.read().decode()
        self.assertIn("gantry_agent_drain_commits_total 1", metrics)
        self.assertIn("gantry_agent_drain_parts_total 1", metrics)
        left = [f for _, _, files in os.walk(self.path("local", node, "drain")) for f in files]
        self.assertEqual(left, [])  # the record went with the drain
        run([gantry, "ckpt", "--root", root, "--job", "run-7", "verify", "2"])

    def test_a_save_cut_off_while_gantryd_was_away_is_drained_when_it_is_back(self):
        # gantryd is down: the held job is released by hand (as fail-open does), Slurm runs it,
        # and it is killed right after step 2 reached its node's local tier.
        root, agents = self.start_checkpoint_site(gantryd=False)
        saver = self.saver("os.kill(os.getpid(), signal.SIGKILL)\n")
        script = self.checkpoint_job(root, "run-9", saver)
        out = self.path("job.out")
        job = self.sbatch(["-A", "chemistry", "-N", "1", "--gres=gpu:h100:1", "-t", "5",
                           "-o", out], script)
        run(["scontrol", "release", job])
        eventually("the job ended", lambda: job_state(job)[0] == "", PATIENCE)
        with open(out) as f:
            text = f.read()
        self.assertIsNotNone(re.search(r"^node (\S+)$", text, re.M), text + self.logs())
        gantry = os.path.join(BUILD_DIR, "apps/gantry/gantry")

        def committed():
            ls = json.loads(run([gantry, "ckpt", "--root", root, "--job", "run-9", "ls",
                                 "--json"]))
            return [s["step"] for s in ls if s["committed"]]
        self.assertEqual(committed(), [1])

        # gantryd comes back: it never saw the job, but Slurm still names where it ran.
        self.start_gantryd_with(agents)
        try:
            eventually("step 2 committed", lambda: committed() == [1, 2], PATIENCE)
        except AssertionError as e:
            raise AssertionError(f"{e}; committed: {committed()}\n{self.logs()}") from None
        run([gantry, "ckpt", "--root", root, "--job", "run-9", "verify", "2"])
        self.assertIn(f"{job} checkpoint-drain", self.logs())

    def test_a_save_left_by_a_requeued_run_is_drained_before_it_starts_again(self):
        root, agents = self.start_checkpoint_site()

        # The first run commits step 1, saves step 2 (256 MiB) to its node's local tier and
        # stops itself (SIGSTOP: its drain to the root stops with it) until the requeue kills
        # it. The second run only says which step it would restore.
        saver = self.saver(
            "os.kill(os.getpid(), signal.SIGSTOP)\n",
            restart="print('restarted on', node, 'latest', c.latest_step(), flush=True)\n")
        script = self.checkpoint_job(root, "run-8", saver)
        out = self.path("job.out")
        job = self.sbatch(["-A", "chemistry", "-N", "1", "--gres=gpu:h100:1", "-t", "5",
                           "--requeue", "--open-mode=append", "-o", out], script)

        def text():
            try:
                with open(out) as f:
                    return f.read()
            except FileNotFoundError:
                return ""
        eventually("step 2 in the local tier", lambda: re.search(r"^node \S+$", text(), re.M),
                   PATIENCE)
        run(["scontrol", "requeue", job])
        eventually("the job requeued and ended", lambda: job_state(job)[0] == "", PATIENCE * 2)
        restarted = re.search(r"^restarted on (\S+) latest (\d+)$", text(), re.M)
        self.assertIsNotNone(restarted, text() + self.logs())
        # It restored the save its first run left on the node, drained before it started.
        self.assertEqual(restarted.group(2), "2", text() + self.logs())
        def kinds():
            with sqlite3.connect(f"file:{self.path('state.db')}?mode=ro", uri=True) as db:
                return [k for (k,) in db.execute(
                    "SELECT kind FROM events WHERE job = ? ORDER BY seq", (job,))]
        eventually("gantryd saw the job end", lambda: "finish" in kinds(), PATIENCE)
        # Asked at the requeue and waited for before the restart; asked again at the end.
        k = kinds()
        self.assertIn("requeue", k, k)
        self.assertIn("stage-drained", k, k)
        requeued = k.index("requeue")
        self.assertIn("checkpoint-drain", k[requeued:k.index("stage-drained")], k)
        self.assertIn("checkpoint-drain", k[k.index("finish"):], k)
        run([os.path.join(BUILD_DIR, "apps/gantry/gantry"), "ckpt", "--root", root, "--job",
             "run-8", "verify", "2"])

if __name__ == "__main__":
    unittest.main()
