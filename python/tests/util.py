"""Shared helpers of the gantry Python tests: a temp-dir test case with a hang watchdog, and a
way to run Python scripts in child processes with the same module path."""

import faulthandler
import os
import subprocess
import sys
import tempfile
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(TESTS_DIR)
SOURCE_DIR = os.path.dirname(PYTHON_DIR)

# A test that hangs dumps every thread's stack and exits instead of waiting for ctest's timeout.
WATCHDOG_SECONDS = 120


class TempDirTestCase(unittest.TestCase):
    """Gives each test a fresh temp directory (self.tmp) and a hang watchdog."""

    def setUp(self):
        super().setUp()
        self._tmp = tempfile.TemporaryDirectory(prefix="gantry-py-")
        self.tmp = self._tmp.name
        faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)

    def tearDown(self):
        faulthandler.cancel_dump_traceback_later()
        self._tmp.cleanup()
        super().tearDown()

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


def child_env(**extra):
    """The environment for a child Python: this process's module path first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(args, timeout=60, **popen_kwargs):
    """Runs `python3 args...` to completion; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable] + list(args), env=child_env(), capture_output=True,
                          text=True, timeout=timeout, check=False, **popen_kwargs)


def split_rows(global_rows, world_size, rank):
    """(row_offset, rows) of `rank` when `global_rows` rows are split as evenly as possible
    (the first global_rows % world_size ranks get one more)."""
    base, extra = divmod(global_rows, world_size)
    offset = rank * base + min(rank, extra)
    return offset, base + (1 if rank < extra else 0)
