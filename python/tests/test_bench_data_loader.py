"""bench/data_loader.py runs end to end on tiny inputs (--quick): every loader delivers every
sample's bytes exactly once (the script checks it and exits non-zero otherwise) and the tables
come out; so does bench/data_ring_growth.py. Timings are not checked: benchmarks are not
assertions."""

import json
import os
import unittest

from util import SOURCE_DIR, TempDirTestCase, run_python

import _gantry

BENCH = os.path.join(SOURCE_DIR, "bench", "data_loader.py")
# The gantry CLI of the build tree this extension comes from (the bench packs with it).
CLI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(_gantry.__file__))), "apps",
                   "gantry", "gantry")


class DataLoaderBenchSmokeTest(TempDirTestCase):
    def test_quick_run(self):
        self.assertTrue(os.access(CLI, os.X_OK), f"{CLI} missing: build the gantry target")
        r = run_python([BENCH, "--quick", "--gantry", CLI, "--dir", self.tmp], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        lines = r.stdout.splitlines()
        result = json.loads(lines[-1])
        for name, count in (("small", 300), ("large", 12)):
            part = result["local"][name]
            self.assertEqual(part["samples"], count)
            for kind in ("raw", "gantry", "gantry0", "gantryb", "gantry0b", "gantrybp",
                         "gantry0bp", "gantry0b_copy", "gantry0b_packed", "tarfile", "files",
                         "tarfile0", "files0"):
                self.assertEqual(len(part["samples_per_s"][kind]), 1, kind)
                self.assertGreater(part["samples_per_s"][kind][0], 0, kind)
            self.assertEqual(set(part["best"]), {"raw", "tarfile", "imagefolder", "files"})
            for family, best in part["best"].items():
                self.assertIn(best["baseline"], (family, family + "0"))
                self.assertIn(best["gantry"], ("gantry", "gantryb", "gantrybp",
                                               "gantry0_touch", "gantry0b_touch",
                                               "gantry0b_copy", "gantry0b_packed"))
            self.assertIn(name, result["stall"])
            for row in ("batched", "batched, prefetch thread", "batched, in process",
                        "batched, in process, prefetch"):
                self.assertIn(f"{name} ({row})", result["stall"])
                for run in result["stall"][f"{name} ({row})"]["runs"]:
                    self.assertGreater(run[4], 0)  # the rate the loop achieved
                    self.assertGreaterEqual(run[5], 0)  # its steps' mean late wake
        self.assertGreaterEqual(result["stall_idle_late_s"], 0)
        self.assertTrue(any(l.startswith("| gantry |") for l in lines))
        self.assertEqual(os.listdir(self.tmp), [])  # its temp data is gone

    def test_the_widened_pipe_rows(self):
        r = run_python([BENCH, "--quick", "--gantry", CLI, "--dir", self.tmp, "--parts", "local",
                        "--kinds", "gantryb,gantryb_wide,files,files_wide"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        result = json.loads(r.stdout.splitlines()[-1])
        for name in ("small", "large"):
            rates = result["local"][name]["samples_per_s"]
            for kind in ("gantryb", "gantryb_wide", "files", "files_wide"):
                self.assertGreater(rates[kind][0], 0, kind)
            self.assertIn(result["local"][name]["best"]["files"]["baseline"],
                          ("files", "files_wide"))

    def test_the_fresh_process_and_pipe_rows(self):
        kinds = ("gantrybp_fresh", "gantrybp_nokeep_fresh", "gantrybp_pipe_fresh", "gantryb_pipe",
                 "files_fresh")
        r = run_python([BENCH, "--quick", "--gantry", CLI, "--dir", self.tmp, "--parts", "local",
                        "--kinds", ",".join(kinds)], timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        result = json.loads(r.stdout.splitlines()[-1])
        for name in ("small", "large"):
            rates = result["local"][name]["samples_per_s"]
            for kind in kinds:  # each pass checked its samples and bytes, in its own process
                self.assertGreater(rates[kind][0], 0, kind)
        self.assertEqual(os.listdir(self.tmp), [])


class RingGrowthBenchSmokeTest(TempDirTestCase):
    def test_a_tiny_run(self):
        # bench/data_ring_growth.py exits non-zero when a loader misses a sample.
        r = run_python([os.path.join(SOURCE_DIR, "bench", "data_ring_growth.py"), "--workers",
                        "1", "--repeat", "1", "--large-shards", "2"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn("96 samples, 1 workers", r.stdout)
        self.assertRegex(r.stdout, r"\| grown \| [0-9,]+ \|")
        self.assertRegex(r.stdout, r"grown / fixed: [0-9.]+")


if __name__ == "__main__":
    unittest.main()
