"""`pip install .` as a user does it: a copy of the checkout installed into a fresh virtual
environment of Debian's Python that sees the system packages (numpy, torch), with no package
index, then used from outside the checkout."""

import faulthandler
import os
import shutil
import subprocess
import sys
import textwrap
import unittest

from util import SOURCE_DIR, TempDirTestCase

# What a checkout holds that a build does not read (and would only slow the copy).
SKIP = shutil.ignore_patterns(".git", "build", "node_modules", "testdata", "__pycache__",
                              "*.egg-info", "out")


# Building the extension from scratch takes minutes on two cores.
BUILD_SECONDS = 1500


class PipInstallTest(TempDirTestCase):

    def setUp(self):
        super().setUp()
        faulthandler.dump_traceback_later(BUILD_SECONDS, exit=True)

    def test_pip_install_from_a_checkout_builds_and_imports(self):
        # A copy, so the build writes nowhere in the tree under test.
        src = self.path("src")
        shutil.copytree(SOURCE_DIR, src, ignore=SKIP, symlinks=True)
        venv = self.path("venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       check=True)
        python = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["GANTRY_BUILD_JOBS"] = env.get("GANTRY_BUILD_JOBS", "2")
        r = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                            src], env=env, capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-4000:])

        # Used from elsewhere, without PYTHONPATH: the installed package and extension load.
        script = textwrap.dedent("""
            import os, sys, tempfile
            import torch
            import gantry, gantry.checkpoint as ckpt
            venv = sys.argv[1]
            assert gantry.__file__.startswith(venv), gantry.__file__
            assert ckpt._gantry.__file__.startswith(venv), ckpt._gantry.__file__
            root = tempfile.mkdtemp()
            model = torch.nn.Linear(3, 2)
            with ckpt.Checkpointer(root) as c:
                c.save({"model": model, "step": 1}, 1).result()
                other = torch.nn.Linear(3, 2)
                c.load(into={"model": other, "step": 0})
            assert torch.equal(model.weight, other.weight)
            print("ok", gantry.__version__)
        """)
        r = subprocess.run([python, "-c", script, venv], env=env, cwd=self.tmp,
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "ok 0.1.0")

        # pip knows it, with its metadata, and removes it again.
        r = subprocess.run([python, "-m", "pip", "show", "gantry"], env=env,
                           capture_output=True, text=True, check=True)
        self.assertIn("License: Apache-2.0", r.stdout)
        self.assertIn("Requires: numpy", r.stdout)
        subprocess.run([python, "-m", "pip", "uninstall", "-y", "gantry"], env=env,
                       capture_output=True, check=True)
        r = subprocess.run([python, "-c", "import gantry.checkpoint"], env=env, cwd=self.tmp,
                           capture_output=True, text=True, check=False)
        self.assertNotEqual(r.returncode, 0)


if __name__ == "__main__":
    unittest.main()
