"""bench/live_vs_sim.py's export: a job requeued after it started (preempted for fair share)
has one sacct record per run, the last stamped with the requeue instant as Submit; the export
the simulator reads must keep the job's first submission, or the simulator queues it late."""

import importlib.util
import os
import sys
import unittest

from util import SOURCE_DIR

BENCH = os.path.join(SOURCE_DIR, "bench")


def load_bench():
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location("live_vs_sim",
                                                      os.path.join(BENCH, "live_vs_sim.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(BENCH)


class FirstSubmissionsTest(unittest.TestCase):
    EXPORT = ("JobID|Account|Submit|Start|End|State\n"
              "7|physics|2026-12-03T22:44:40|2026-12-03T22:44:41|2026-12-03T22:44:50|COMPLETED\n"
              "38|physics|2026-12-03T22:49:05|2026-12-03T22:49:06|2026-12-03T22:49:17|COMPLETED\n")
    RUNS = ("7|2026-12-03T22:44:40\n"
            "38|2026-12-03T22:44:40\n"   # the run that was preempted
            "38|2026-12-03T22:49:05\n")  # the run after the requeue

    def test_a_requeued_job_keeps_its_first_submission(self):
        out = load_bench().first_submissions(self.EXPORT, self.RUNS)
        rows = [line.split("|") for line in out.splitlines()]
        self.assertEqual(rows[0], self.EXPORT.splitlines()[0].split("|"))
        self.assertEqual({r[0]: r[2] for r in rows[1:]},
                         {"7": "2026-12-03T22:44:40", "38": "2026-12-03T22:44:40"})
        # Everything else of the record is the last run's, as sacct -X gives it.
        self.assertEqual(rows[2][3:], ["2026-12-03T22:49:06", "2026-12-03T22:49:17", "COMPLETED"])

    def test_jobs_without_other_runs_are_unchanged(self):
        self.assertEqual(load_bench().first_submissions(self.EXPORT, ""), self.EXPORT)


if __name__ == "__main__":
    unittest.main()
