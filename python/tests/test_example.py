"""examples/train.py killed with SIGKILL mid-run and resumed ends with the same parameters, bit
for bit, as a run never interrupted."""

import os
import random
import signal
import subprocess
import sys
import threading
import unittest

import torch

from util import SOURCE_DIR, TempDirTestCase, child_env

TRAIN = os.path.join(SOURCE_DIR, "examples", "train.py")
STEPS, EVERY = 60, 5
RUN_TIMEOUT = 60


class TrainExampleTest(TempDirTestCase):
    def command(self, root, out, delay=0.0):
        return [sys.executable, TRAIN, "--root", root, "--steps", str(STEPS), "--every",
                str(EVERY), "--out", out, "--step-delay", str(delay)]

    def run_to_end(self, cmd):
        r = subprocess.run(cmd, env=child_env(), capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.rstrip().endswith("done"), r.stdout[-500:])
        return r.stdout

    def run_and_kill(self, cmd, rng):
        """Starts the run, waits for its first committed checkpoint, lets it run a random
        number of further steps, and kills it with SIGKILL."""
        proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # A run that stops printing must not hang the test.
        timer = threading.Timer(RUN_TIMEOUT, proc.kill)
        timer.start()
        lines = []
        try:
            extra_steps = rng.randint(0, 30)
            committed = None
            for line in proc.stdout:
                lines.append(line.rstrip())
                if committed is None and line.startswith("committed step "):
                    committed = int(line.split()[2])
                elif committed is not None and line.startswith("step "):
                    if extra_steps == 0:
                        proc.send_signal(signal.SIGKILL)
                        break
                    extra_steps -= 1
            proc.wait()
        finally:
            timer.cancel()
            proc.stdout.close()
            proc.stderr.close()
        self.assertEqual(proc.returncode, -signal.SIGKILL,
                         "the run ended before it was killed:\n" + "\n".join(lines[-5:]))
        self.assertIsNotNone(committed)
        return lines

    def test_kill_and_resume_is_bit_exact(self):
        reference = self.path("reference.pt")
        out = self.run_to_end(self.command(self.path("ref-root"), reference))
        self.assertIn("starting fresh", out)
        self.assertIn(f"committed step {STEPS}", out)

        rng = random.Random(20240601)
        root, final = self.path("root"), self.path("final.pt")
        # The delay keeps the run alive long enough to be killed between its steps' output
        # and the end; it changes no arithmetic.
        killed = self.run_and_kill(self.command(root, final, delay=0.03), rng)
        last_step = max(int(l.split()[1]) for l in killed if l.startswith("step "))
        self.assertLess(last_step, STEPS)
        self.assertFalse(os.path.exists(final))

        resumed = self.run_to_end(self.command(root, final))
        first = resumed.splitlines()[0]
        self.assertRegex(first, r"^resumed from step \d+$")
        resumed_from = int(first.split()[-1])
        self.assertGreaterEqual(resumed_from, EVERY)
        self.assertLessEqual(resumed_from, last_step)

        want = torch.load(reference)
        got = torch.load(final)
        self.assertEqual(list(want), list(got))
        for name in want:
            self.assertEqual(want[name].dtype, got[name].dtype, name)
            self.assertTrue(torch.equal(want[name], got[name]), name)
            self.assertEqual(want[name].numpy().tobytes(), got[name].numpy().tobytes(), name)


if __name__ == "__main__":
    unittest.main()
