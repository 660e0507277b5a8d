"""`python3 -m gantry export|import|ls`: checkpoints to and from plain torch.save files."""

import os
import unittest

import torch

import gantry.checkpoint as ckpt
from test_checkpoint import assert_same
from util import TempDirTestCase, run_python

torch.set_num_threads(1)


def trained_state():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters())
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 2,
            "rng": torch.get_rng_state()}


class Evil:
    """Unpickling this would create a file: torch.load(weights_only=True) must refuse it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class ToolsTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.root = self.path("root")

    def gantry(self, *args):
        return run_python(["-m", "gantry"] + list(args), timeout=120)

    def test_export_then_torch_load(self):
        state = trained_state()
        with ckpt.Checkpointer(self.root, job="exp") as c:
            c.save({"other": torch.zeros(3)}, 1).wait()
            c.save(state, 2).wait()
        out = self.path("latest.pt")
        r = self.gantry("export", "--root", self.root, "--job", "exp", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("step 2", r.stderr)
        assert_same(self, state, torch.load(out))

        out1 = self.path("one.pt")
        r = self.gantry("export", "--root", self.root, "--job", "exp", "--step", "1", out1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(torch.equal(torch.load(out1)["other"], torch.zeros(3)))

        # An exported file imports back (the safe loader accepts what export writes).
        r = self.gantry("import", "--root", self.root, "--job", "back", "--step", "3", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ckpt.Checkpointer(self.root, job="back") as c:
            assert_same(self, state, c.load(3))

    def test_import_then_load(self):
        state = trained_state()
        src = self.path("in.pt")
        torch.save(state, src)
        r = self.gantry("import", "--root", self.root, "--job", "imp", "--step", "7", "--tag",
                        "imported", src)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ckpt.Checkpointer(self.root, job="imp") as c:
            self.assertEqual(c.latest_step(), 7)
            self.assertEqual(c.manifest(7).tags, ["imported"])
            assert_same(self, state, c.load(7))
        r = self.gantry("ls", "--root", self.root, "--job", "imp")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n\s+7\s+yes\s+1/1")

    def test_import_refuses_code(self):
        marker = self.path("pwned")
        for zipped in (True, False):  # the current format and the pre-1.6 one
            src = self.path(f"evil-{zipped}.pt")
            torch.save({"x": Evil(marker)}, src, _use_new_zipfile_serialization=zipped)
            r = self.gantry("import", "--root", self.root, "--step", "1", src)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("gantry import:", r.stderr)
            self.assertIn("refusing to load global io.open", r.stderr)
            self.assertFalse(os.path.exists(marker))

    def test_import_legacy_format(self):
        state = trained_state()
        src = self.path("legacy.pt")
        torch.save(state, src, _use_new_zipfile_serialization=False)
        r = self.gantry("import", "--root", self.root, "--step", "1", src)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ckpt.Checkpointer(self.root) as c:
            assert_same(self, state, c.load(1))

    def test_export_missing_step(self):
        r = self.gantry("export", "--root", self.root, "--step", "5", self.path("x.pt"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no committed checkpoint", r.stderr)
        with ckpt.Checkpointer(self.root) as c:
            c.save({"a": torch.zeros(1)}, 1).wait()
        r = self.gantry("export", "--root", self.root, "--step", "5", self.path("x.pt"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("step 5", r.stderr)
        self.assertFalse(os.path.exists(self.path("x.pt")))


if __name__ == "__main__":
    unittest.main()
