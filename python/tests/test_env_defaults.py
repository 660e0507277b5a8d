"""The Checkpointer's environment defaults come from the C++ reader `gantry ckpt` uses
(gantry/ckpt/env_options.h), so one environment means the same checkpointer in both."""

import os
import unittest
from unittest import mock

import torch

import gantry.checkpoint as ckpt
from gantry import _native
from util import TempDirTestCase

_gantry = _native.load()

VARS = ("GANTRY_CKPT_ROOT", "GANTRY_CKPT_LOCAL", "GANTRY_CKPT_JOB", "GANTRY_CKPT_PEERS",
        "RANK", "WORLD_SIZE")


def clean_env(**values):
    """os.environ without the checkpoint variables, plus `values` (restored afterwards)."""
    env = {k: v for k, v in os.environ.items() if k not in VARS}
    env.update(values)
    return mock.patch.dict(os.environ, env, clear=True)


class EnvDefaultsTest(TempDirTestCase):
    def test_the_binding_reads_the_same_variables_as_the_cli(self):
        with clean_env():
            self.assertEqual(_gantry.env_defaults(),
                             {"root": "", "local": "", "job": "default", "peers": []})
            self.assertEqual(_gantry.env_rank(), 0)
            self.assertEqual(_gantry.env_world_size(), 1)
        with clean_env(GANTRY_CKPT_ROOT="s3://b/p", GANTRY_CKPT_LOCAL="/nvme",
                       GANTRY_CKPT_JOB="llama", GANTRY_CKPT_PEERS="http://a:1,,http://b:2,",
                       RANK="3", WORLD_SIZE="8"):
            self.assertEqual(_gantry.env_defaults(),
                             {"root": "s3://b/p", "local": "/nvme", "job": "llama",
                              "peers": ["http://a:1", "http://b:2"]})
            self.assertEqual(_gantry.env_rank(), 3)
            self.assertEqual(_gantry.env_world_size(), 8)

    def test_checkpointer_uses_them(self):
        root = self.path("root")
        with clean_env(GANTRY_CKPT_ROOT=root, GANTRY_CKPT_JOB="from-env"):
            c = ckpt.Checkpointer()
            try:
                self.assertEqual(c.root, root)
                self.assertEqual(c.job, "from-env")
                self.assertEqual((c.rank, c.world_size), (0, 1))
                c.save({"w": torch.ones(3)}, 1).wait()
            finally:
                c.close()
        self.assertTrue(os.path.isdir(os.path.join(root, "ckpt", "from-env")))

    def test_a_bad_rank_fails_only_when_it_is_used(self):
        with clean_env(GANTRY_CKPT_ROOT=self.path("root"), RANK="zero"):
            with self.assertRaises(ValueError) as cm:
                ckpt.Checkpointer()
            self.assertIn("RANK='zero'", str(cm.exception))
            c = ckpt.Checkpointer(rank=0)  # given explicitly: RANK is not read
            c.close()


if __name__ == "__main__":
    unittest.main()
