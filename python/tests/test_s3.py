"""The multi-rank tests of test_multirank.py on S3: a real endpoint (Ceph RGW, scripts/rgw)
named by GANTRY_S3_ENDPOINT, GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY and GANTRY_S3_BUCKET.
Skipped when they are unset, except under CI (CI set), where a missing endpoint fails."""

import os
import random
import unittest

from test_multirank import MultiRankMixin
from util import TempDirTestCase


class S3MultiRankTest(MultiRankMixin, TempDirTestCase):
    def setUp(self):
        super().setUp()
        endpoint = os.environ.get("GANTRY_S3_ENDPOINT", "")
        if not endpoint:
            if os.environ.get("CI"):
                self.fail("CI is set but GANTRY_S3_ENDPOINT is not: RGW did not start")
            self.skipTest("GANTRY_S3_ENDPOINT unset (start RGW with scripts/rgw start)")
        bucket = os.environ["GANTRY_S3_BUCKET"]
        # A fresh prefix per test keeps runs apart in the shared bucket.
        prefix = f"pytest-{os.getpid()}-{random.randrange(10**6)}/{self._testMethodName}"
        self.root = f"s3://{bucket}/{prefix}"
        self.options = {"endpoint": endpoint, "region": "us-east-1",
                        "access_key": os.environ.get("GANTRY_S3_ACCESS_KEY", ""),
                        "secret_key": os.environ.get("GANTRY_S3_SECRET_KEY", "")}


if __name__ == "__main__":
    unittest.main()
