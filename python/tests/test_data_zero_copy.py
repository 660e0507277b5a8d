"""gantry.data's zero-copy path: local shards mapped, decode=False fields as read-only
memoryviews that keep their shard mapped after the dataset is gone, bytes in DataLoader
workers, and a shard file cut short under its mapping failing loudly instead of crashing."""

import gc
import os
import subprocess
import sys
import tarfile
import io
import textwrap
import unittest

import torch
import torch.utils.data

from util import TempDirTestCase

from gantry import _native
from gantry.data import StreamingDataset

_gantry = _native.load()


def write_bins(folder, shards, per_shard, size):
    """Tar shards of samples "k<n>" holding one field "bin": `size` bytes of one letter."""
    os.makedirs(folder, exist_ok=True)
    n = 0
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w") as tar:
            for _ in range(per_shard):
                payload = bytes([65 + n % 26]) * size
                info = tarfile.TarInfo(f"k{n}.bin")
                info.size = size
                tar.addfile(info, io.BytesIO(payload))
                n += 1


def expected(n, size):
    return bytes([65 + n % 26]) * size


class ZeroCopyTest(TempDirTestCase):
    def test_decode_off_fields_are_read_only_views_of_the_mapped_shard(self):
        write_bins(self.path("ds"), 3, 4, 5000)
        samples = list(StreamingDataset(self.path("ds"), decode=False, window=4, seed=3,
                                        mmap=True))
        self.assertEqual(len(samples), 12)
        for s in samples:
            v = s["bin"]
            self.assertIsInstance(v, memoryview)
            self.assertTrue(v.readonly)
            self.assertEqual(v, expected(int(s["__key__"][1:]), 5000))
            self.assertTrue(v.obj.mapped)  # a slice of the shard's own mapping
            with self.assertRaises(TypeError):
                v[0] = 1
        # Read, not mapped, on request; and decode=True still gives bytes for raw fields.
        read = list(StreamingDataset(self.path("ds"), decode=False, mmap=False, seed=3,
                                     window=4))
        self.assertEqual([bytes(s["bin"]) for s in read], [bytes(s["bin"]) for s in samples])
        self.assertFalse(read[0]["bin"].obj.mapped)
        decoded = list(StreamingDataset(self.path("ds"), seed=3, window=4))
        self.assertIsInstance(decoded[0]["bin"], bytes)
        self.assertEqual(decoded[0]["bin"], samples[0]["bin"])
        self.assertIsInstance(list(StreamingDataset(self.path("ds"), decode=False,
                                                    zero_copy=False))[0]["bin"], bytes)

    def test_views_outlive_the_dataset_and_its_iterator(self):
        write_bins(self.path("ds"), 4, 3, 70000)
        gc.collect()
        base = _gantry.live_mappings()
        ds = StreamingDataset(self.path("ds"), decode=False, window=3, seed=1, mmap=True)
        it = iter(ds)
        kept = [next(it) for _ in range(5)]
        del it, ds
        gc.collect()
        self.assertGreater(_gantry.live_mappings(), base)  # the views hold their shards mapped
        for s in kept:
            self.assertEqual(bytes(s["bin"]), expected(int(s["__key__"][1:]), 70000))
        del kept, s
        gc.collect()
        self.assertEqual(_gantry.live_mappings(), base)  # and only they did

    def test_views_of_shards_read_into_reused_memory_keep_it_from_reuse(self):
        # mmap=False: shards are read into buffers that a dropped shard's successor reuses. A
        # view must keep its buffer: reading the rest of the epoch (every other shard, through
        # the same pool) must not overwrite the bytes the kept views show.
        write_bins(self.path("ds"), 6, 3, 70000)
        ds = StreamingDataset(self.path("ds"), decode=False, window=3, seed=1, mmap=False)
        it = iter(ds)
        kept = [next(it) for _ in range(2)]
        self.assertFalse(kept[0]["bin"].obj.mapped)
        rest = [bytes(s["bin"]) for s in it]
        self.assertEqual(len(rest), 16)
        del it, ds
        gc.collect()
        for s in kept:
            self.assertEqual(bytes(s["bin"]), expected(int(s["__key__"][1:]), 70000))

    def test_dataloader_workers_hand_over_bytes(self):
        write_bins(self.path("ds"), 4, 5, 100)
        ds = StreamingDataset(self.path("ds"), decode=False, batch_size=2, window=5)
        loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2,
                                             collate_fn=lambda items: items)
        got = [s for batch in loader for s in batch]
        self.assertEqual(len(got), 20)
        for s in got:
            self.assertIsInstance(s["bin"], bytes)
            self.assertEqual(s["bin"], expected(int(s["__key__"][1:]), 100))

    def test_shard_cut_short_under_its_mapping_fails_loudly_not_sigbus(self):
        # In a child process: without the guard it dies of SIGBUS. Once with faulthandler on
        # from the start (pytest's default) and once enabled after the shard was mapped (its
        # handler then sits on top of the guard's).
        write_bins(self.path("ds"), 2, 6, 20000)
        script = textwrap.dedent("""
            import faulthandler, os, sys
            from gantry.data import DataLossError, StreamingDataset
            folder, late = sys.argv[1], sys.argv[2] == "late"
            it = iter(StreamingDataset(folder, decode=False, shuffle=False, mmap=True))
            first = next(it)
            if late:
                faulthandler.disable()
                faulthandler.enable()
            os.truncate(os.path.join(folder, "shard-000000.tar"), 25000)
            last = [next(it) for _ in range(4)][-1]
            print("past the cut:", set(bytes(last["bin"])), flush=True)
            try:
                next(it)
                print("no error")
            except DataLossError as e:
                print("DataLossError:", e)
        """)
        env = dict(os.environ)
        for late in ("early", "late"):
            write_bins(self.path("ds"), 2, 6, 20000)
            r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script,
                                self.path("ds"), late], env=env, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("past the cut: {0}", r.stdout)
            self.assertIn("DataLossError:", r.stdout)
            self.assertIn("shard-000000.tar", r.stdout)


if __name__ == "__main__":
    unittest.main()
