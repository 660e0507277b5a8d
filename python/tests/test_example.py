"""examples/train.py: a model trained from a packed dataset through gantry.data and a DataLoader
with workers, killed with SIGKILL mid-epoch and resumed with --resume, sees the same sample
sequence and ends with the same parameters, bit for bit, as a run never interrupted."""

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
# 600 samples in batches of 16: 38 steps an epoch (the last batch short), 76 in two epochs.
# Checkpoints every 5 steps never fall on an epoch's end, so every resume is mid-epoch.
SAMPLES, BATCH, EPOCHS, EVERY = 600, 16, 2, 5
STEPS_PER_EPOCH = -(-SAMPLES // BATCH)
STEPS = EPOCHS * STEPS_PER_EPOCH
RUN_TIMEOUT = 60


def step_lines(lines):
    """{step: its whole output line}: epoch, loss and the batch's sample keys."""
    return {int(l.split()[1]): l for l in lines if l.startswith("step ")}


class TrainExampleTest(TempDirTestCase):
    def command(self, root, out, *extra, delay=0.0):
        return [sys.executable, TRAIN, "--root", root, "--out", out, "--data-dir",
                self.path("data"), "--samples", str(SAMPLES), "--batch-size", str(BATCH),
                "--epochs", str(EPOCHS), "--every", str(EVERY), "--workers", "2",
                "--step-delay", str(delay), *extra]

    def run_to_end(self, cmd):
        r = subprocess.run(cmd, env=child_env(), capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.rstrip().endswith("done"), r.stdout[-500:])
        return r.stdout.splitlines()

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
            extra_steps = rng.randint(0, 40)
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

    def assert_same_parameters(self, want_file, got_file):
        want, got = torch.load(want_file), torch.load(got_file)
        self.assertEqual(list(want), list(got))
        for name in want:
            self.assertEqual(want[name].dtype, got[name].dtype, name)
            self.assertEqual(want[name].numpy().tobytes(), got[name].numpy().tobytes(), name)

    def test_kill_mid_epoch_and_resume_is_bit_exact(self):
        reference = self.path("reference.pt")
        ref = self.run_to_end(self.command(self.path("ref-root"), reference))
        self.assertEqual(ref[0], "starting fresh")
        self.assertIn(f"committed step {STEPS - STEPS % EVERY}", ref)
        ref_steps = step_lines(ref)
        self.assertEqual(sorted(ref_steps), list(range(1, STEPS + 1)))
        # Every sample exactly once per epoch, in an order that is not the dataset's.
        for epoch in range(EPOCHS):
            keys = [k for s in range(epoch * STEPS_PER_EPOCH + 1, (epoch + 1) * STEPS_PER_EPOCH + 1)
                    for k in ref_steps[s].split()[-1].split(",")]
            self.assertIn(f" epoch {epoch} ", ref_steps[epoch * STEPS_PER_EPOCH + 1])
            self.assertEqual(sorted(keys), [f"s{i:06d}" for i in range(SAMPLES)])
            self.assertNotEqual(keys, sorted(keys))

        for seed in (20240601,):
            with self.subTest(seed=seed):
                rng = random.Random(seed)
                root, final = self.path(f"root-{seed}"), self.path(f"final-{seed}.pt")
                # The delay keeps the run alive long enough to be killed between its steps'
                # output and the end; it changes no arithmetic.
                killed = self.run_and_kill(self.command(root, final, delay=0.03), rng)
                killed_steps = step_lines(killed)
                self.assertLess(max(killed_steps), STEPS)
                self.assertFalse(os.path.exists(final))

                # Without --resume, a root that holds checkpoints is refused.
                r = subprocess.run(self.command(root, final), env=child_env(),
                                   capture_output=True, text=True, timeout=RUN_TIMEOUT)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("--resume", r.stderr)

                resumed = self.run_to_end(self.command(root, final, "--resume"))
                head = resumed[0].split()
                self.assertEqual(head[:3], ["resumed", "from", "step"], resumed[0])
                resumed_from, consumed = int(head[3]), int(head[7])
                self.assertGreaterEqual(resumed_from, EVERY)
                self.assertLessEqual(resumed_from, max(killed_steps))
                self.assertTrue(0 < consumed < SAMPLES, f"not mid-epoch: {resumed[0]}")

                # The sample sequence: the killed run up to its checkpoint, then the resumed
                # run, equals the uninterrupted run's, step by step (keys, epoch and loss).
                seen = {s: l for s, l in killed_steps.items() if s <= resumed_from}
                again = step_lines(resumed)
                self.assertEqual(min(again), resumed_from + 1)
                seen.update(again)
                self.assertEqual(seen, ref_steps)
                self.assert_same_parameters(reference, final)

    def test_mds_dataset_trains_on_every_sample(self):
        samples = 100  # later flags override the command's: a smaller set, one epoch
        out = self.run_to_end(self.command(self.path("mds-root"), self.path("mds.pt"),
                                           "--format", "mds", "--epochs", "1", "--samples",
                                           str(samples)))
        steps = step_lines(out)
        self.assertEqual(sorted(steps), list(range(1, -(-samples // BATCH) + 1)))
        keys = [k for l in steps.values() for k in l.split()[-1].split(",")]
        self.assertEqual(sorted(keys), [f"s{i:06d}" for i in range(samples)])
        self.assertTrue(os.path.exists(self.path("mds.pt")))


if __name__ == "__main__":
    unittest.main()
