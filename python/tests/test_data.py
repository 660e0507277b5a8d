"""gantry.data.StreamingDataset: decoding, exactly-once across ranks and DataLoader workers (0 and
2), and resuming mid-epoch on another world size with the uninterrupted sequence."""

import base64
import io
import json
import os
import struct
import tarfile
import unittest
import zlib

import numpy as np
import torch
import torch.utils.data

from util import SOURCE_DIR, TempDirTestCase

from gantry import data as gdata
from gantry.data import StreamingDataset

FIXTURES = os.path.join(SOURCE_DIR, "testdata", "datasets")


def write_wds(folder, shard_sizes):
    """WebDataset shards written by Python's tarfile; sample i of shard s has key "s{s}-{i}"."""
    os.makedirs(folder, exist_ok=True)
    for s, n in enumerate(shard_sizes):
        with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w") as tar:
            for i in range(n):
                key = f"s{s}-{i}"
                buf = io.BytesIO()
                np.save(buf, np.arange(3, dtype=np.int16) + i)
                members = {
                    "txt": f"sample {key}".encode(),
                    "json": json.dumps({"shard": s, "i": i}).encode(),
                    "cls": str(i % 7).encode(),
                    "npy": buf.getvalue(),
                    "bin": bytes([s, i % 256]),
                }
                for ext, payload in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))


def one_pixel_png():
    """A valid 1x1 RGBA PNG, built here (chunk CRCs and all)."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + bytes([255, 0, 0, 255]))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


def keys_of(batches):
    out = []
    for b in batches:
        out.extend(b["__key__"])
    return out


class DecodingTest(TempDirTestCase):
    def test_webdataset_fields_decode_by_extension(self):
        write_wds(self.path("ds"), [3, 2])
        ds = StreamingDataset(self.path("ds"), shuffle=False)
        self.assertEqual(ds.format, "webdataset")
        self.assertEqual(ds.shard_samples, [3, 2])
        samples = list(ds)
        self.assertEqual([s["__key__"] for s in samples], ["s0-0", "s0-1", "s0-2", "s1-0", "s1-1"])
        s = samples[4]
        self.assertEqual(s["txt"], "sample s1-1")
        self.assertEqual(s["json"], {"shard": 1, "i": 1})
        self.assertEqual(s["cls"], 1)
        np.testing.assert_array_equal(s["npy"], np.array([1, 2, 3], dtype=np.int16))
        self.assertEqual(s["npy"].dtype, np.int16)
        self.assertEqual(s["bin"], bytes([1, 1]))

    def test_decode_off_and_transform(self):
        write_wds(self.path("ds"), [2])
        raw = list(StreamingDataset(self.path("ds"), shuffle=False, decode=False))
        self.assertEqual(raw[0]["txt"], b"sample s0-0")
        self.assertEqual(raw[0]["cls"], b"0")
        seen = list(StreamingDataset(self.path("ds"), shuffle=False,
                                     transform=lambda s: (s["__key__"], s["cls"] * 10)))
        self.assertEqual(seen, [("s0-0", 0), ("s0-1", 10)])

    def test_mds_fixture_written_by_mosaicml_streaming(self):
        folder = os.path.join(FIXTURES, "mds", "zstd")
        with open(os.path.join(folder, "expected.jsonl")) as f:
            expected = [json.loads(line) for line in f if line.strip()]
        ds = StreamingDataset(folder, shuffle=False)
        self.assertEqual(ds.format, "mds")
        samples = list(ds)
        self.assertEqual(len(samples), len(expected))
        for got, want in zip(samples, expected):
            self.assertEqual(got["blob"], base64.b64decode(want["blob"]))
            self.assertEqual(got["id"], want["id"])
            self.assertIsInstance(got["id"], int)
            self.assertEqual(int(got["label"]), want["label"])
            self.assertEqual(got["text"], want["text"])
            self.assertEqual(got["vec"].dtype, np.float32)
            np.testing.assert_array_equal(got["vec"], np.array(want["vec"], dtype=np.float32))

    def test_images_decode_with_pillow_or_stay_bytes(self):
        try:
            from PIL import Image
        except ImportError:
            Image = None
        png = one_pixel_png()
        got = gdata.decode_field("png", "", png)
        if Image is None:
            self.assertEqual(got, png)
        else:
            self.assertEqual(got.size, (1, 1))

    def test_missing_dataset_is_not_found(self):
        with self.assertRaises(gdata.NotFoundError):
            StreamingDataset(self.path("nothing-here"))


class OrderTest(TempDirTestCase):
    SIZES = [17, 5, 23, 11, 30, 2, 19]  # 107 samples: no world x batch divides it

    def setUp(self):
        super().setUp()
        write_wds(self.path("ds"), self.SIZES)
        self.all_keys = {f"s{s}-{i}" for s, n in enumerate(self.SIZES) for i in range(n)}

    def dataset(self, **kw):
        kw.setdefault("seed", 5)
        kw.setdefault("window", 20)
        return StreamingDataset(self.path("ds"), decode=False, **kw)

    def loader(self, ds, workers, batch):
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                           collate_fn=lambda items: {
                                               "__key__": [x["__key__"] for x in items]})

    def test_exactly_once_across_ranks_and_workers(self):
        for world in (1, 3):
            for workers in (0, 2):
                keys = []
                for rank in range(world):
                    ds = self.dataset(rank=rank, world_size=world, batch_size=4)
                    got = keys_of(self.loader(ds, workers, 4))
                    self.assertEqual(len(got), ds.samples_this_rank())
                    keys.extend(got)
                self.assertEqual(len(keys), len(self.all_keys), (world, workers))
                self.assertEqual(set(keys), self.all_keys, (world, workers))

    def test_rank_and_world_from_the_environment(self):
        old = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
        os.environ.update(RANK="1", WORLD_SIZE="4")
        try:
            ds = self.dataset()
            self.assertEqual((ds.rank, ds.world_size), (1, 4))
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def uninterrupted(self, epoch):
        ds = self.dataset()
        ds.set_epoch(epoch)
        return [s["__key__"] for s in ds]

    def train(self, datasets, workers, batch, steps=None):
        """Synchronous training: each step every rank takes one batch. Returns the keys in the
        order the job consumed them (step by step, rank by rank) and the steps taken."""
        iters = [iter(self.loader(ds, workers, batch)) for ds in datasets]
        consumed, step = [], 0
        while steps is None or step < steps:
            got_any = False
            for it in iters:
                b = next(it, None)
                if b is not None:
                    consumed.extend(b["__key__"])
                    got_any = True
            if not got_any:
                break
            step += 1
        return consumed, step

    def test_resume_on_another_world_size_continues_the_global_order(self):
        want = self.uninterrupted(epoch=2)
        self.assertEqual(set(want), self.all_keys)
        for (w1, k1, b1), (w2, k2, b2), steps in [((2, 2, 4), (3, 0, 2), 5),
                                                  ((1, 0, 3), (4, 2, 5), 7),
                                                  ((3, 2, 1), (1, 2, 4), 11)]:
            first = [self.dataset(rank=r, world_size=w1, batch_size=b1) for r in range(w1)]
            for ds in first:
                ds.set_epoch(2)
            before, taken = self.train(first, k1, b1, steps)
            self.assertEqual(taken, steps)
            # Rank 0's state, as a checkpoint would hold it (JSON and back).
            state = json.loads(json.dumps(first[0].state_dict(num_samples=steps * b1)))
            self.assertEqual(state["epoch"], 2)
            self.assertEqual(state["consumed"], steps * w1 * b1)
            second = [self.dataset(rank=r, world_size=w2, batch_size=b2, seed=999)
                      for r in range(w2)]
            for ds in second:
                ds.load_state_dict(state)  # the saved seed wins over 999
            after, _ = self.train(second, k2, b2)
            self.assertEqual(before + after, want, ((w1, k1, b1), (w2, k2, b2), steps))

    def test_state_without_workers_counts_itself(self):
        ds = self.dataset(batch_size=4)
        it = iter(self.loader(ds, 0, 4))
        for _ in range(3):
            next(it)
        self.assertEqual(ds.state_dict()["consumed"], 12)
        with_workers = self.dataset(batch_size=4)
        next(iter(self.loader(with_workers, 2, 4)))
        with self.assertRaises(gdata.InvalidArgumentError):
            with_workers.state_dict()  # its workers iterated in other processes

    def test_epochs_and_seeds_differ(self):
        e0, e1 = self.uninterrupted(0), self.uninterrupted(1)
        self.assertEqual(set(e0), set(e1))
        self.assertNotEqual(e0, e1)
        other_seed = [s["__key__"] for s in self.dataset(seed=6)]
        self.assertNotEqual(e0, other_seed)
        self.assertEqual(e0, self.uninterrupted(0))

    def test_state_goes_into_a_checkpoint_with_the_model(self):
        import gantry.checkpoint as ckpt
        want = self.uninterrupted(epoch=0)
        ds = self.dataset(batch_size=4)
        it = iter(self.loader(ds, 0, 4))
        seen = keys_of([next(it) for _ in range(5)])
        model = {"w": torch.arange(6, dtype=torch.float32)}
        ckpt.save({"model": model, "data": ds.state_dict()}, step=5, root=self.path("ckpt"),
                  job="data").wait()
        restored = ckpt.load(step=5, root=self.path("ckpt"), job="data")
        self.assertTrue(torch.equal(restored["model"]["w"], model["w"]))
        again = self.dataset(batch_size=4)
        again.load_state_dict(restored["data"])
        self.assertEqual(seen + [s["__key__"] for s in again], want)

    def test_state_of_another_dataset_is_refused(self):
        ds = self.dataset()
        list(ds)
        state = ds.state_dict()
        self.assertEqual(state["consumed"], sum(self.SIZES))
        state["samples"] += 1
        with self.assertRaises(gdata.InvalidArgumentError):
            self.dataset().load_state_dict(state)


if __name__ == "__main__":
    unittest.main()
