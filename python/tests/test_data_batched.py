"""gantry.data's batched reading: StreamingDataset(batched=True) yields exactly the DataLoader's
batches of the unbatched dataset (ranks, workers, batch sizes, decoding, resume), DataLoader
workers hand a batch's bytes over as one block, and a failed read inside a batch loses no
sample."""

import copy
import gc
import io
import json
import os
import pickle
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import textwrap
import threading
import unittest

import torch
import torch.utils.data

from util import SOURCE_DIR, HeldRequests, TempDirTestCase, in_forked_child

from test_data import write_wds
from test_data_zero_copy import expected, write_bins

import gantry.data as gantry_data
from gantry import _native
from gantry.data import InvalidArgumentError, NotFoundError, SampleBatch, StreamingDataset

_gantry = _native.load()


def as_lists(items):
    """The unbatched loader's batches as plain lists, comparable with SampleBatch columns."""
    return {k: [x.get(k) for x in items] for k in items[0]}


def plain(value):
    return bytes(value) if isinstance(value, memoryview) else value


def flatten(batches, field):
    return [[plain(v) for v in b[field]] for b in batches]


class WdsTestCase(TempDirTestCase):
    """A test case over a WebDataset of uneven shards written in its temp directory."""

    SIZES = [17, 5, 23, 11, 30, 2, 19]  # 107 samples: no world x batch divides it

    def setUp(self):
        super().setUp()
        write_wds(self.path("ds"), self.SIZES)

    def dataset(self, **kw):
        kw.setdefault("seed", 5)
        kw.setdefault("window", 20)
        kw.setdefault("decode", False)
        return StreamingDataset(self.path("ds"), **kw)


class BatchedTest(WdsTestCase):

    def unbatched(self, workers, batch, **kw):
        ds = self.dataset(batch_size=batch, **kw)
        return list(torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                                collate_fn=as_lists))

    def batched(self, workers, batch, **kw):
        ds = self.dataset(batch_size=batch, batched=True, **kw)
        return list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))

    def test_the_same_batches_as_the_dataloader_makes(self):
        for world, workers, batch in ((1, 0, 1), (1, 1, 7), (1, 2, 4), (3, 0, 4), (3, 2, 7),
                                      (3, 2, 1)):
            for rank in range(world):
                want = self.unbatched(workers, batch, rank=rank, world_size=world)
                got = self.batched(workers, batch, rank=rank, world_size=world)
                where = (world, rank, workers, batch)
                self.assertTrue(all(isinstance(b, SampleBatch) for b in got), where)
                self.assertEqual([b["__key__"] for b in got], [b["__key__"] for b in want],
                                 where)
                self.assertEqual(flatten(got, "bin"), flatten(want, "bin"), where)
                self.assertEqual(flatten(got, "txt"), flatten(want, "txt"), where)

    def test_len_counts_batches(self):
        for world, workers, batch in ((1, 0, 4), (1, 2, 7), (3, 2, 5), (3, 0, 200)):
            for rank in range(world):
                ds = self.dataset(batch_size=batch, batched=True, rank=rank, world_size=world)
                loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
                self.assertEqual(len(loader), len(list(loader)), (world, rank, workers, batch))
                self.assertEqual(len(self.dataset(batch_size=batch, rank=rank, world_size=world)),
                                 ds.samples_this_rank())

    def test_decoded_batches_hold_what_decode_gives(self):
        want = self.unbatched(2, 5, decode=True)
        got = self.batched(2, 5, decode=True)
        self.assertEqual([b["__key__"] for b in got], [b["__key__"] for b in want])
        for g, w in zip(got, want):
            self.assertEqual(g["txt"], w["txt"])
            self.assertEqual(g["json"], w["json"])
            self.assertEqual(g["cls"], w["cls"])
            self.assertEqual([a.tolist() for a in g["npy"]], [a.tolist() for a in w["npy"]])

    def test_workers_hand_over_read_only_views_of_one_bytes_block(self):
        write_bins(self.path("bins"), 4, 5, 1000)
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=5,
                              batched=True)
        got = 0
        for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2):
            self.assertEqual(b.fields, ["bin"])
            for key, value in zip(b["__key__"], b["bin"]):
                self.assertIsInstance(value, memoryview)
                self.assertTrue(value.readonly)
                self.assertEqual(bytes(value), expected(int(key[1:]), 1000))
                got += 1
            # bytes, or (after each worker's first batch) a view of shared memory: below
            self.assertIsInstance(b.block, (bytes, memoryview))
            self.assertEqual(len(b.block), 1000 * len(b))
        self.assertEqual(got, 20)

    def test_in_process_batches_are_views_of_the_mapped_shards(self):
        write_bins(self.path("bins"), 2, 4, 64)
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=4,
                              batched=True, shuffle=False)
        batches = list(ds)
        self.assertEqual([len(b) for b in batches], [3, 3, 2])
        self.assertEqual(ds.state_dict()["consumed"], 8)
        view = batches[0]["bin"][0]
        self.assertIsInstance(view, memoryview)
        self.assertTrue(view.readonly)
        self.assertEqual(bytes(view), expected(0, 64))
        self.assertEqual(batches[2].positions, [6, 7])

    def test_packed_batches_in_process_hold_every_value_in_one_block(self):
        want = self.batched(0, 4)
        for workers in (0, 2):
            got = self.batched(workers, 4, packed=True)
            self.assertEqual([b["__key__"] for b in got], [b["__key__"] for b in want], workers)
            for g, w in zip(got, want):
                self.assertIsInstance(g.block, bytes if workers == 0 else (bytes, memoryview))
                for field in ("bin", "txt"):
                    spans = g.spans(field)
                    self.assertEqual(spans.shape, (len(g), 2))
                    values = [None if begin < 0 else g.block[begin:end]
                              for begin, end in spans.tolist()]
                    self.assertEqual(values, [plain(v) for v in w[field]], (workers, field))
                    self.assertEqual([plain(v) for v in g[field]], values)
                with self.assertRaises(KeyError):
                    g.spans("jpg")
            self.assertEqual(sum(len(b.block) for b in got),
                             sum(sum(len(v) for v in b[f] if v is not None)
                                 for b in want for f in b.fields))

    def test_packed_false_and_the_default_in_process_are_not_packed(self):
        for kw in ({}, {"packed": False}):
            b = next(iter(self.dataset(batch_size=4, batched=True, **kw)))
            self.assertIsNone(b.block, kw)
            self.assertIsNone(b.spans("bin"), kw)
        b = next(iter(torch.utils.data.DataLoader(self.dataset(batch_size=4, batched=True,
                                                               packed=False),
                                                  batch_size=None, num_workers=1)))
        self.assertIsNone(b.block)  # in a worker too: columns of bytes, pickled one by one

    def test_packed_needs_undecoded_batches(self):
        for kw in ({"batched": True, "decode": True}, {"batched": False}):
            with self.assertRaises(InvalidArgumentError):
                self.dataset(batch_size=4, packed=True, **kw)

    def test_a_field_some_samples_lack_is_none_there(self):
        import io
        import tarfile
        os.makedirs(self.path("mixed"))
        with tarfile.open(self.path("mixed", "shard-000000.tar"), "w") as tar:
            for key, exts in (("a", ("txt", "bin")), ("b", ("txt",)), ("c", ("bin",))):
                for ext in exts:
                    data = f"{key}.{ext}".encode()
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        for workers in (0, 1):
            ds = StreamingDataset(self.path("mixed"), decode=False, batch_size=3,
                                  batched=True, shuffle=False)
            (b,) = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
            self.assertEqual(b.keys(), ["__key__", "txt", "bin"])
            self.assertEqual([plain(v) for v in b["txt"]], [b"a.txt", b"b.txt", None])
            self.assertEqual([plain(v) for v in b["bin"]], [b"a.bin", None, b"c.bin"])
            samples = [{k: plain(v) for k, v in s.items()} for s in b.samples()]
            self.assertEqual(samples, [{"__key__": "a", "txt": b"a.txt", "bin": b"a.bin"},
                                       {"__key__": "b", "txt": b"b.txt"},
                                       {"__key__": "c", "bin": b"c.bin"}])
            self.assertIn("bin", b)
            self.assertNotIn("jpg", b)
            with self.assertRaises(KeyError):
                b["jpg"]

    def test_a_batch_pickles_with_its_bytes(self):
        ds = self.dataset(batch_size=4, batched=True, shuffle=False)
        b = next(iter(ds))
        copy = pickle.loads(pickle.dumps(b))
        self.assertEqual(copy["__key__"], b["__key__"])
        self.assertEqual(copy["bin"], [bytes(v) for v in b["bin"]])
        self.assertEqual(copy.positions, b.positions)

    def test_transform_gets_the_whole_batch(self):
        ds = self.dataset(batch_size=6, batched=True, transform=lambda b: (len(b), b.fields))
        got = list(ds)
        self.assertEqual(sum(n for n, _ in got), 107)
        self.assertEqual(got[0][1], ["txt", "json", "cls", "npy", "bin"])

    def test_resume_mid_epoch_continues_the_batches(self):
        want = [k for b in self.batched(2, 4) for k in b["__key__"]]
        for workers, steps in ((0, 3), (2, 5)):
            ds = self.dataset(batch_size=4, batched=True)
            it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
            before = []
            for _ in range(steps):
                before.extend(next(it)["__key__"])
            del it
            state = json.loads(json.dumps(ds.state_dict(num_samples=len(before))))
            again = self.dataset(batch_size=4, batched=True, seed=999)
            again.load_state_dict(state)
            after = [k for b in torch.utils.data.DataLoader(again, batch_size=None,
                                                            num_workers=workers)
                     for k in b["__key__"]]
            self.assertEqual(before + after, want, (workers, steps))


class NextBatchTest(TempDirTestCase):
    def failed_mid_batch(self):
        """A reader of 3 shards of 4 samples whose next_batch(6) failed after samples 0-3, at
        shard 1, which is missing (in away.tar) until the test puts it back."""
        write_bins(self.path("bins"), 3, 4, 16)
        source = _gantry.DataSource(self.path("bins"), wds_shard_samples=[4, 4, 4])
        reader = _gantry.DataReader(source, shuffle=False, read_ahead=0, zero_copy=False)
        shutil.move(self.path("bins", "shard-000001.tar"), self.path("away.tar"))
        with self.assertRaises(NotFoundError):
            reader.next_batch(6)  # samples 0-3 read, then shard 1 is missing
        return reader

    def test_a_shard_missing_mid_batch_loses_no_sample(self):
        reader = self.failed_mid_batch()
        shutil.move(self.path("away.tar"), self.path("bins", "shard-000001.tar"))
        positions, keys, fields, columns = reader.next_batch(6)
        self.assertEqual(positions, [0, 1, 2, 3, 4, 5])
        self.assertEqual(keys, ["k0", "k1", "k2", "k3", "k4", "k5"])
        self.assertEqual(fields, [("bin", "")])
        self.assertEqual(columns, [[expected(n, 16) for n in range(6)]])
        positions, _, _, _ = reader.next_batch(6)
        self.assertEqual(positions, [6, 7, 8, 9, 10, 11])
        with self.assertRaises(StopIteration):
            reader.next_batch(6)

    def test_a_smaller_batch_after_a_failed_one_takes_the_samples_it_left(self):
        # The failed call left 4 samples pending; a retry asking for 2 crashed the process
        # (it read into a negative count of slots) before the fix.
        reader = self.failed_mid_batch()
        self.assertEqual(reader.next_batch(2)[0], [0, 1])  # no shard needed: no error
        positions, keys, _, (block, _) = reader.next_batch(1, True)
        self.assertEqual((positions, keys, block), ([2], ["k2"], expected(2, 16)))
        with self.assertRaises(NotFoundError):
            reader.next_batch(3)  # sample 3, then shard 1 again
        shutil.move(self.path("away.tar"), self.path("bins", "shard-000001.tar"))
        self.assertEqual(reader.next_batch(3)[0], [3, 4, 5])
        self.assertEqual(reader.next_batch(100)[0], list(range(6, 12)))

    def test_packed_columns_are_spans_of_one_block(self):
        write_bins(self.path("bins"), 1, 3, 5)
        source = _gantry.DataSource(self.path("bins"))
        reader = _gantry.DataReader(source, shuffle=False)
        positions, keys, fields, (block, spans) = reader.next_batch(3, True)
        self.assertEqual(positions, [0, 1, 2])
        self.assertEqual(block, expected(0, 5) + expected(1, 5) + expected(2, 5))
        self.assertEqual(list(memoryview(spans).cast("q")), [0, 5, 5, 10, 10, 15])
        with self.assertRaises(ValueError):
            reader.next_batch(0)

    def cut_short_under_a_packed_batch(self, size, cut, copy_threads, mapped=True):
        """Shard 0 of 2 shards of 6 samples of `size` bytes, cut to `cut` bytes after its first
        sample was read: what the next packed batch of 4 gives, read in a child process (the
        copy into the block is what touches the bytes past the cut). Mapped, or read without
        its large members (mapped=False)."""
        write_bins(self.path("ds"), 2, 6, size)
        script = textwrap.dedent("""
            import os, sys
            from gantry import _native
            g = _native.load()
            folder, cut, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
            mapped = sys.argv[4] == "1"  # whatever the default here
            source = g.DataSource(folder, map_files=mapped)
            reader = g.DataReader(source, shuffle=False, read_ahead=0, copy_threads=threads)
            reader.next_batch(1, True)  # maps shard 0
            os.truncate(os.path.join(folder, "shard-000000.tar"), cut)
            try:
                _, keys, _, (block, _) = reader.next_batch(4, True)
                print("delivered", keys, set(block[-1000:]))
            except g.DataLossError as e:
                print("DataLossError:", e)
        """)
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script, self.path("ds"),
                            str(cut), str(copy_threads), "1" if mapped else "0"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def test_a_shard_cut_short_under_a_packed_batch_is_data_loss_not_zeros(self):
        out = self.cut_short_under_a_packed_batch(20000, 25000, 0)
        self.assertIn("DataLossError:", out)
        self.assertIn("shard-000000.tar", out)
        self.assertIn("cut short", out)

    def test_a_large_block_copied_by_several_threads_holds_every_byte_in_place(self):
        # Batches of 2-5 MiB: each thread's share is over 1 MiB, so the copy is split, and a
        # share ends inside a sample. Random bytes, so a piece copied to the wrong offset shows.
        rng = random.Random(7)
        sizes = [1536 << 10, 700 << 10, 2100 << 10, 1 << 20, 3, 1900 << 10]
        payloads = [rng.randbytes(n) for n in sizes]
        os.makedirs(self.path("big"))
        for s in range(2):
            with tarfile.open(self.path("big", f"shard-{s:06d}.tar"), "w") as tar:
                for i in range(3):
                    n = 3 * s + i
                    members = [("bin", payloads[n])] + ([("txt", b"t%d" % n)] if n % 2 else [])
                    for ext, payload in members:
                        info = tarfile.TarInfo(f"k{n}.{ext}")
                        info.size = len(payload)
                        tar.addfile(info, io.BytesIO(payload))
        source = _gantry.DataSource(self.path("big"))
        got = {}
        for threads in (0, 1, 3):
            reader = _gantry.DataReader(source, shuffle=False, copy_threads=threads)
            got[threads] = [reader.next_batch(3, True) for _ in range(2)]
        for batch in got[0]:
            positions, _, fields, (block, spans) = batch
            spans = list(memoryview(spans).cast("q"))
            self.assertEqual([f[0] for f in fields], ["bin", "txt"])
            for i, n in enumerate(positions):
                self.assertEqual(block[spans[2 * i]:spans[2 * i + 1]], payloads[n])
                t = 2 * (len(positions) + i)
                self.assertEqual(block[spans[t]:spans[t + 1]] if spans[t] >= 0 else None,
                                 b"t%d" % n if n % 2 else None)
        self.assertEqual(got[1], got[0])
        self.assertEqual(got[3], got[0])
        batches = list(StreamingDataset(self.path("big"), decode=False, batched=True,
                                        packed=True, batch_size=3, shuffle=False,
                                        copy_threads=2))
        self.assertEqual([b.block for b in batches], [g[3][0] for g in got[0]])
        for bad in (-1, _gantry.MAX_COPY_THREADS + 1):
            with self.assertRaises(InvalidArgumentError):
                StreamingDataset(self.path("big"), copy_threads=bad)
        with self.assertRaises(ValueError):
            _gantry.DataReader(source, copy_threads=_gantry.MAX_COPY_THREADS + 1)

    def test_a_shard_cut_short_under_a_copy_split_between_threads_is_data_loss(self):
        # Samples 1-4 of shard 0, 1 MiB each, make a 4 MiB block copied in two shares: the
        # caller's is samples 1 and 2, the helper's 3 and 4. The cut is at the first page
        # boundary inside sample 3, so only the helper's copy takes the SIGBUS.
        out = self.cut_short_under_a_packed_batch(1 << 20, 769 * 4096, 1)
        self.assertIn("DataLossError:", out)
        self.assertIn("shard-000000.tar", out)

    def test_a_shard_cut_short_before_its_large_members_are_read_is_data_loss(self):
        # Read, not mapped: the members of 1 MiB stay in the file until the copy reads them
        # straight into the block, which finds the file shorter (split in two, or not).
        for threads in (0, 1):
            out = self.cut_short_under_a_packed_batch(1 << 20, 769 * 4096, threads, mapped=False)
            self.assertIn("DataLossError:", out)
            self.assertIn("shard-000000.tar", out)
            self.assertIn("cut short", out)
            shutil.rmtree(self.path("ds"))

    def write_mixed(self, folder):
        """Two tar shards of samples with a large field (100 KiB to 2 MiB of random bytes)
        and small ones, some named past 100 bytes (pax headers); returns {key: {field: bytes}}."""
        rng = random.Random(11)
        want = {}
        os.makedirs(folder)
        for s in range(2):
            with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w",
                              format=tarfile.PAX_FORMAT) as tar:
                for i in range(5):
                    n = 5 * s + i
                    key = ("p" * 120 if n % 3 == 1 else "k") + str(n)
                    fields = {"cls": b"%d" % n,
                              "bin": rng.randbytes(rng.choice([100 << 10, 700 << 10, 2 << 20]))}
                    if n % 2:
                        fields["txt"] = rng.randbytes(3000)
                    want[key] = fields
                    for ext, payload in fields.items():
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size = len(payload)
                        tar.addfile(info, io.BytesIO(payload))
        return want

    def test_large_members_read_straight_into_the_block_are_the_files_bytes(self):
        want = self.write_mixed(self.path("mixed"))
        samples = [0] * 10

        def read(large_member_bytes, packed, threads):
            source = _gantry.DataSource(self.path("mixed"), map_files=False,
                                        large_member_bytes=large_member_bytes)
            reader = _gantry.DataReader(source, seed=3, window=10, copy_threads=threads,
                                        zero_copy=True)
            batches = []
            while True:
                try:
                    positions, keys, fields, columns = reader.next_batch(4, packed)
                except StopIteration:
                    return batches
                names = [f[0] for f in fields]
                if packed:
                    block, spans = columns
                    spans = memoryview(spans).cast("q")
                    columns = [[bytes(block[spans[2 * (c * len(keys) + i)]:
                                            spans[2 * (c * len(keys) + i) + 1]])
                                if spans[2 * (c * len(keys) + i)] >= 0 else None
                                for i in range(len(keys))] for c in range(len(names))]
                else:
                    columns = [[None if v is None else bytes(v) for v in column]
                               for column in columns]
                for i, key in enumerate(keys):
                    got = {name: columns[c][i] for c, name in enumerate(names)
                           if columns[c][i] is not None}
                    self.assertEqual(got, want[key], key)
                    samples[positions[i]] += 1
                batches.append((positions, keys))

        whole = read(0, True, 0)
        self.assertEqual(samples, [1] * 10)
        for packed in (True, False):
            for threads in (0, 1, 2):
                self.assertEqual(read(None, packed, threads), whole)
        self.assertEqual(samples, [7] * 10)
        # Unpacked, a view of a field reads that member alone: its shard's other large members
        # stay in the file.
        source = _gantry.DataSource(self.path("mixed"), map_files=False)
        reader = _gantry.DataReader(source, shuffle=False, zero_copy=True, read_ahead=0)
        _, _, fields = next(iter(reader))
        view = dict((name, value) for name, _, value in fields)["bin"]
        self.assertGreater(view.obj.unread_bytes, 1 << 20)
        self.assertEqual(bytes(view), want["k0"]["bin"])
        # Through DataLoader workers and their batch rings: the same blocks.
        blocks = {}
        for large in (0, None):
            ds = StreamingDataset(self.path("mixed"), decode=False, batched=True, packed=True,
                                  batch_size=2, seed=3, window=10, mmap=False,
                                  large_member_bytes=large)
            loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
            blocks[large] = [bytes(b.block) for b in loader]
        self.assertEqual(blocks[None], blocks[0])
        self.assertEqual(len(blocks[0]), 5)
        with self.assertRaises(InvalidArgumentError):
            StreamingDataset(self.path("mixed"), large_member_bytes=-1)

    def write_random_bins(self, folder, shards, per_shard, size, seed=5, counts=None):
        """Tar shards of samples "k<n>" with one field "bin" of `size` random bytes; returns
        the payloads by n."""
        rng = random.Random(seed)
        payloads = []
        os.makedirs(folder)
        for s in range(shards):
            with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w") as tar:
                for _ in range(per_shard):
                    payloads.append(rng.randbytes(size))
                    info = tarfile.TarInfo(f"k{len(payloads) - 1}.bin")
                    info.size = size
                    tar.addfile(info, io.BytesIO(payloads[-1]))
        return payloads

    def read_batches(self, reader, calls):
        """(positions, keys, block bytes) of next_batch for each (n, packed, ahead) of `calls`,
        the block rebuilt from the columns where unpacked; stops at the end."""
        got = []
        for n, packed, ahead in calls:
            try:
                positions, keys, _, columns = reader.next_batch(n, packed, None, ahead)
            except StopIteration:
                break
            block = bytes(columns[0]) if packed else b"".join(bytes(v) for v in columns[0])
            got.append((positions, keys, block))
        return got

    def test_blocks_copied_ahead_are_the_blocks_copied_in_turn(self):
        # 1 MiB samples in batches of 3: blocks of 3 MiB, split between two threads, so each
        # call with ahead=True starts the next block's copy before it returns.
        payloads = self.write_random_bins(self.path("ds"), 3, 5, 1 << 20)
        source = _gantry.DataSource(self.path("ds"), map_files=False)

        def reader():
            # No read-ahead thread: a batch read ahead is one whose shards the reader holds,
            # the same ones every run.
            return _gantry.DataReader(source, seed=4, window=10, copy_threads=1, read_ahead=0)

        plain = self.read_batches(reader(), [(3, True, False)] * 6)
        r = reader()
        ahead = self.read_batches(r, [(3, True, True)] * 6)
        self.assertGreaterEqual(r.copied_ahead, 2)
        self.assertEqual(ahead, plain)
        self.assertEqual(len(ahead), 5)
        whole = self.read_batches(_gantry.DataReader(source, seed=4, window=10),
                                  [(100, False, False)])
        self.assertEqual([p for positions, _, _ in ahead for p in positions], whole[0][0])
        for _, keys, block in ahead:
            self.assertEqual(block, b"".join(payloads[int(k[1:])] for k in keys))
        # A call that asks for something else than the block read ahead gets its samples as if
        # nothing had been read ahead: another size, unpacked, without ahead, then ahead again.
        calls = [(3, True, True), (3, True, True), (2, True, True), (3, True, True),
                 (3, False, True), (1, True, False), (3, True, True)]
        r = reader()
        self.assertEqual(self.read_batches(r, calls),
                         self.read_batches(reader(), [(n, p, False) for n, p, _ in calls]))
        self.assertGreaterEqual(r.copied_ahead, 1)
        self.assertEqual(r.remaining, 0)
        # One sample at a time after a batch: the samples read ahead come first, in order.
        r, plain = reader(), reader()
        got = [r.next_batch(3, True, None, True)[0], [next(r)[0] for _ in range(4)],
               r.next_batch(3, True, None, True)[0]]
        want = [plain.next_batch(3, True)[0], [next(plain)[0] for _ in range(4)],
                plain.next_batch(3, True)[0]]
        self.assertEqual(got, want)
        # The block: reused memory, read-only, that pickles as its bytes.
        r = reader()
        positions, keys, _, (block, spans) = r.next_batch(3, True, None, True)
        self.assertIsInstance(block, _gantry.PooledBlock)
        view = memoryview(block)
        self.assertTrue(view.readonly)
        self.assertEqual(len(block), 3 << 20)
        self.assertEqual(pickle.loads(pickle.dumps(block)), bytes(view))
        self.assertEqual(bytes(view[:1 << 20]), payloads[int(keys[0][1:])])
        batch = SampleBatch(positions, keys, [("bin", "")], None, block, spans)
        self.assertEqual(bytes(batch.block), bytes(view))
        # A reader dropped with a block being copied ahead waits for the copy, then goes.
        self.assertTrue(r.copying_ahead)
        del r, view, block, batch
        gc.collect()
        # Through StreamingDataset in process: the same blocks as without the copy threads.
        blocks = {}
        for threads in (0, 1):
            ds = StreamingDataset(self.path("ds"), decode=False, batched=True, packed=True,
                                  batch_size=3, seed=4, window=10, copy_threads=threads,
                                  mmap=False)
            blocks[threads] = [bytes(b.block) for b in ds]
        self.assertEqual(blocks[1], blocks[0])
        self.assertEqual(len(blocks[0]), 5)

    def test_any_mix_of_calls_gives_every_sample_once_in_order(self):
        # A careless caller mixes batch sizes, packed and unpacked, ahead or not, and single
        # samples, on readers with and without a read-ahead thread, mapped or read: whatever
        # the mix, the samples come once each in the reader's order, each with its bytes.
        # Sizes from 64 KiB to 1.5 MiB put blocks on both sides of the 2 MiB line above which
        # they are copied ahead.
        rng = random.Random(12)
        sizes = [rng.choice([64 << 10, 700 << 10, 3 << 19]) for _ in range(36)]
        os.makedirs(self.path("ds"))
        payloads = []
        for s in range(4):
            with tarfile.open(self.path("ds", f"shard-{s:06d}.tar"), "w") as tar:
                for size in sizes[9 * s:9 * s + 9]:
                    payloads.append(rng.randbytes(size))
                    info = tarfile.TarInfo(f"k{len(payloads) - 1}.bin")
                    info.size = size
                    tar.addfile(info, io.BytesIO(payloads[-1]))
        copied_ahead = 0
        for mapped in (False, True):
            source = _gantry.DataSource(self.path("ds"), map_files=mapped)
            whole = _gantry.DataReader(source, seed=7, window=12).next_batch(100, False)[0]
            self.assertEqual(sorted(whole), list(range(36)))
            for trial in range(12):
                reader = _gantry.DataReader(source, seed=7, window=12, copy_threads=1,
                                            read_ahead=trial % 2 * 2)
                got = []
                while True:
                    try:
                        if rng.random() < 0.15:
                            position, key, fields = next(reader)
                            got.append((position, key, bytes(fields[0][2])))
                            continue
                        n, packed, ahead = rng.randint(1, 5), rng.random() < 0.8, rng.random() < 0.8
                        positions, keys, _, columns = reader.next_batch(n, packed, None, ahead)
                    except StopIteration:
                        break
                    self.assertLessEqual(len(keys), n)
                    if packed:
                        block, spans = columns
                        ends = memoryview(spans).cast("q")
                        values = [bytes(memoryview(block)[ends[2 * i]:ends[2 * i + 1]])
                                  for i in range(len(keys))]
                    else:
                        values = [bytes(v) for v in columns[0]]
                    got.extend(zip(positions, keys, values))
                self.assertEqual([p for p, _, _ in got], whole, (mapped, trial))
                for _, key, value in got:
                    self.assertEqual(value, payloads[int(key[1:])], (mapped, trial, key))
                self.assertEqual(reader.remaining, 0)
                copied_ahead += reader.copied_ahead
        self.assertGreater(copied_ahead, 0)

    def write_mds_bins(self, folder, count, size, damaged):
        """An MDS dataset of one shard: `count` samples with one bytes column "bin" of `size`
        random bytes, the column sizes of sample `damaged` overwritten to claim more bytes than
        the sample holds."""
        rng = random.Random(6)
        records = []
        for i in range(count):
            payload = rng.randbytes(size)
            claimed = size + 100 if i == damaged else size
            records.append(struct.pack("<I", claimed) + payload)
        head = 4 + 4 * (count + 1)
        offsets = [head]
        for r in records:
            offsets.append(offsets[-1] + len(r))
        data = struct.pack("<I", count) + struct.pack(f"<{count + 1}I", *offsets) + \
            b"".join(records)
        os.makedirs(folder)
        with open(os.path.join(folder, "shard.00000.mds"), "wb") as f:
            f.write(data)
        shard = {"column_encodings": ["bytes"], "column_names": ["bin"], "column_sizes": [None],
                 "compression": None, "format": "mds", "hashes": [],
                 "raw_data": {"basename": "shard.00000.mds", "bytes": len(data), "hashes": {}},
                 "samples": count, "size_limit": 1 << 30, "version": 2, "zip_data": None}
        with open(os.path.join(folder, "index.json"), "w") as f:
            json.dump({"version": 2, "shards": [shard]}, f)

    def test_packed_batches_of_large_samples_read_their_shards_on_any_machine(self):
        # Where mapping is the default (a cheap first touch), packed batches of large samples
        # still read their shards: their members go straight from the file into the block.
        # Checked on every machine: nothing is mapped while they are read in process.
        payloads = self.write_random_bins(self.path("ds"), 2, 4, 200 << 10)
        base = _gantry.live_mappings()
        ds = StreamingDataset(self.path("ds"), batched=True, packed=True, decode=False,
                              batch_size=2, shuffle=False)
        seen = 0
        for batch in ds:
            self.assertEqual(_gantry.live_mappings(), base)
            for n, view in zip(batch.positions, batch["bin"]):
                self.assertEqual(bytes(view), payloads[n])
                seen += 1
        self.assertEqual(seen, 8)

    def test_an_error_met_reading_ahead_is_the_next_calls(self):
        # Sample 5's record is damaged: reading it fails, whether that read is the call's own
        # or one ahead of it, and at the same call: the one whose batch holds it.
        # Read, not mapped: a mapped shard is never read ahead, and whether a local one is
        # mapped by default depends on the machine (ShardBytes::FirstTouchIsCheap).
        self.write_mds_bins(self.path("ds"), 8, 1 << 20, damaged=5)
        source = _gantry.DataSource(self.path("ds"), map_files=False)
        for ahead in (False, True):
            reader = _gantry.DataReader(source, shuffle=False, copy_threads=1, read_ahead=0)
            self.assertEqual(reader.next_batch(2, True, None, ahead)[0], [0, 1])
            self.assertEqual(reader.next_batch(2, True, None, ahead)[0], [2, 3])
            for _ in range(2):
                with self.assertRaisesRegex(InvalidArgumentError, "sample 5"):
                    reader.next_batch(2, True, None, ahead)
            self.assertEqual(reader.copied_ahead, 1 if ahead else 0)

    def test_a_file_cut_short_under_a_block_copied_ahead_is_data_loss(self):
        # Shard 0 holds 8 samples of 1 MiB, left in the file (mmap off): sample 0 is read on
        # its own (the shard opened), then the file is cut inside sample 5. The batch of
        # samples 1-3 is whole; the block of 4-6 read ahead after it comes short.
        self.write_random_bins(self.path("ds"), 1, 8, 1 << 20)
        path = self.path("ds", "shard-000000.tar")
        source = _gantry.DataSource(self.path("ds"), map_files=False)
        reader = _gantry.DataReader(source, shuffle=False, copy_threads=1, read_ahead=0,
                                    zero_copy=False)
        self.assertEqual(next(reader)[0], 0)
        os.truncate(path, 5 * ((1 << 20) + 512) + 512 + 1000)
        positions, _, _, (block, _) = reader.next_batch(3, True, None, True)
        self.assertEqual(positions, [1, 2, 3])
        self.assertTrue(reader.copying_ahead)
        with self.assertRaisesRegex(_gantry.DataLossError, "shard-000000.tar.*cut short"):
            reader.next_batch(3, True, None, True)
        self.assertEqual(reader.copied_ahead, 0)

    def test_an_unpacked_batch_cut_short_is_lost_and_the_next_one_comes(self):
        # Shard 0's file is cut inside sample 3 after the shard was opened: the unpacked batch
        # of samples 1-3 fails as it reads sample 3 from the file, and its samples are gone;
        # the next call goes on with shard 1 rather than failing on them again.
        self.write_random_bins(self.path("ds"), 2, 4, 1 << 20)
        source = _gantry.DataSource(self.path("ds"), map_files=False)
        reader = _gantry.DataReader(source, shuffle=False, read_ahead=0, zero_copy=False)
        self.assertEqual(next(reader)[0], 0)
        os.truncate(self.path("ds", "shard-000000.tar"), 3 * ((1 << 20) + 512) + 512 + 1000)
        with self.assertRaisesRegex(_gantry.DataLossError, "shard-000000.tar"):
            reader.next_batch(3)
        self.assertEqual(reader.next_batch(3)[0], [4, 5, 6])

    def test_a_second_thread_is_refused_while_one_reads(self):
        # Thread A's next_batch(200) waits inside the reader for shard 1 of an MDS dataset
        # served over http://, held by a proxy; a call from this thread meanwhile would have
        # read into the same buffers (before the guard it waited at the proxy too, and the
        # timer's release made the assertion fail).
        data = self.path("mds")
        shutil.copytree(os.path.join(SOURCE_DIR, "testdata", "datasets", "mds", "hashed"), data)
        agent_port = int(self.start_agent(data)[1].rsplit(":", 1)[1])
        proxy = HeldRequests(agent_port, b"shard.00001.mds")
        self.addCleanup(proxy.close)
        safety = threading.Timer(20, proxy.release)  # a broken guard fails, not hangs
        safety.start()
        self.addCleanup(safety.cancel)
        source = _gantry.DataSource(proxy.url)
        self.assertEqual(source.shard_samples[:2], [168, 154])
        reader = _gantry.DataReader(source, shuffle=False, read_ahead=0)
        got = []
        a = threading.Thread(target=lambda: got.append(reader.next_batch(200)[0]))
        a.start()
        self.assertTrue(proxy.entered.wait(20))
        for call in (lambda: reader.next_batch(1), lambda: reader.next_batch(1, True),
                     lambda: next(reader)):
            with self.assertRaises(_gantry.EngineError) as caught:
                call()
            self.assertIn("another thread", str(caught.exception))
        self.assertFalse(proxy.released.is_set())
        proxy.release()
        a.join(20)
        self.assertEqual(got, [list(range(200))])
        # Once A's call is over, any thread may call again: nothing was skipped meanwhile.
        self.assertEqual(reader.next_batch(10**6)[0], list(range(200, 1500)))

    def test_a_reader_made_before_a_fork_refuses_the_child_and_is_not_destroyed_there(self):
        # Its read-ahead threads are running when the process forks; in the child they do not
        # exist. Before the guard the child read on (a sample of a shard already held) or waited
        # forever, and dropping the reader joined threads that were not there.
        write_bins(self.path("bins"), 3, 4, 16)
        source = _gantry.DataSource(self.path("bins"), wds_shard_samples=[4, 4, 4])
        held = [_gantry.DataReader(source, shuffle=False, read_ahead=2)]  # the one reference
        self.assertEqual(held[0].next_batch(2)[0], [0, 1])

        def child():
            try:
                held[0].next_batch(2)
                return 1  # read on
            except _gantry.EngineError as e:
                if "forked" not in str(e):
                    return 2
            held.clear()  # the child's last reference: dropping it must not wait for threads
            return 0

        self.assertEqual(in_forked_child(child), 0)  # None: the child hung or crashed
        # The parent's reader is untouched by the child.
        self.assertEqual(held[0].next_batch(100)[0], list(range(2, 12)))

    def test_a_huge_batch_takes_what_is_left_without_allocating_for_it(self):
        write_bins(self.path("bins"), 2, 3, 5)
        source = _gantry.DataSource(self.path("bins"))
        reader = _gantry.DataReader(source, shuffle=False)
        positions, _, _, _ = reader.next_batch(10**15)
        self.assertEqual(positions, [0, 1, 2, 3, 4, 5])
        with self.assertRaises(StopIteration):
            reader.next_batch(10**15)
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=10**12, batched=True)
        self.assertEqual([len(b) for b in ds], [6])


if __name__ == "__main__":
    unittest.main()


class SharedBatchesTest(TempDirTestCase):
    """DataLoader workers hand packed batches to the training process through a ring of shared
    memory: only where each lies crosses the pipe."""

    def left_behind(self):
        """Rings in /dev/shm of the workers this test's loaders started (other test files,
        running at the same time, have rings of their own)."""
        pids = set(os.listdir(self.path("pids")))  # each file is named after its worker's pid
        self.assertTrue(pids)
        return [n for n in os.listdir("/dev/shm")
                if any(n.startswith(f"gantry-batches-{pid}-") for pid in pids)]

    def loader(self, workers=2, **kw):
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=6, seed=2,
                              batched=True, **kw)
        os.makedirs(self.path("pids"), exist_ok=True)
        pids = self.path("pids")

        def note_pid(_):
            with open(os.path.join(pids, str(os.getpid())), "w") as f:
                f.write(str(os.getpid()))
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                           worker_init_fn=note_pid)

    def check(self, batches, size):
        for b in batches:
            for key, value in zip(b["__key__"], b["bin"]):
                self.assertEqual(bytes(value), expected(int(key[1:]), size), key)

    @staticmethod
    def shared(batch):
        return isinstance(batch.block, memoryview)

    def test_worker_batches_come_through_shared_memory(self):
        write_bins(self.path("bins"), 6, 6, 2000)
        n = shared = 0
        for b in self.loader():
            self.check([b], 2000)
            if self.shared(b):
                self.assertEqual(type(b.block.obj).__name__, "RingBlock")
                self.assertTrue(b.block.readonly)
                self.assertEqual(len(b.block), 3 * 2000)
                shared += 1
            n += 1
        self.assertEqual(n, 12)
        # Each worker's first batch sizes its ring and is the first in it (before 'the first
        # block makes the ring', each worker's first batch crossed the pipe).
        self.assertEqual(shared, n)
        # The iterator ended, its workers with it, and their rings are gone from /dev/shm.
        self.assertEqual(self.left_behind(), [])

    def test_off_too_large_or_too_small(self):
        write_bins(self.path("bins"), 4, 6, 2000)
        self.assertEqual(StreamingDataset(self.path("bins"), shared_batches=True).shared_batches,
                         None)  # True: the default size
        for off in (0, False):
            got = list(self.loader(shared_batches=off))
            self.assertEqual(sum(map(self.shared, got)), 0, off)
            self.check(got, 2000)
        # More than /dev/shm holds: refused at its reservation, and the pipe carries them all.
        got = list(self.loader(shared_batches="1T"))
        self.assertEqual(sum(map(self.shared, got)), 0)
        self.check(got, 2000)
        self.assertEqual(self.left_behind(), [])
        got = list(self.loader(workers=1, shared_batches="1M"))
        self.assertEqual(sum(map(self.shared, got)), len(got))
        for bad in (100, "lots", -1):
            with self.assertRaises(InvalidArgumentError):
                self.loader(shared_batches=bad)

    def test_persistent_workers_keep_their_ring_across_epochs(self):
        write_bins(self.path("bins"), 6, 6, 2000)
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=6, seed=2,
                              batched=True)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                             persistent_workers=True)
        before = set(_gantry.batch_rings())  # this process's earlier tests' (or swept)
        rings = set()
        for epoch in range(3):
            ds.set_epoch(epoch)
            got = list(loader)
            self.assertEqual(len(got), 12)
            self.check(got, 2000)
            # Every batch, the first epoch's first of each worker too.
            self.assertEqual(sum(map(self.shared, got)), 12, epoch)
            rings |= set(_gantry.batch_rings()) - before
        self.assertEqual(len(rings), 2)  # one per worker, mapped here once

    def test_a_ring_whose_file_is_gone_is_forgotten_though_its_pid_lives(self):
        # As when a worker has exited, removing its ring, and a new process has its pid.
        write_bins(self.path("bins"), 6, 6, 2000)

        def loader():
            ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=6,
                                  seed=2, batched=True)
            return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                               persistent_workers=True)
        before = set(_gantry.batch_rings())
        first = loader()
        self.check(list(first), 2000)
        (old,) = set(_gantry.batch_rings()) - before
        os.unlink(old)  # its worker lives on (persistent), as a process with a reused pid does
        held = list(loader())  # a new worker's ring, mapped here at its first batch
        self.check(held, 2000)
        now = set(_gantry.batch_rings()) - before
        self.assertEqual(len(now), 1)
        self.assertNotIn(old, now)
        del first

    def test_a_batch_larger_than_the_ring_crosses_the_pipe(self):
        write_bins(self.path("bins"), 4, 6, 40000)  # batches of 120,000 bytes
        got = list(self.loader(workers=1, shared_batches="64K"))
        self.assertEqual(sum(map(self.shared, got)), 0)
        self.check(got, 40000)

    def read_growing_batches(self):
        """Reads, through one worker, batches of one sample whose first 4 are 100 bytes and the
        next 150 are 100,000: (batches read, how many came through shared memory, the rings
        mapped here after each, whether the first ring's file was there at the last batch)."""
        os.makedirs(self.path("bins"))
        sizes = {}
        for s, (count, size) in enumerate([(4, 100), (50, 100000), (50, 100000), (50, 100000)]):
            with tarfile.open(os.path.join(self.path("bins"), f"shard-{s:06d}.tar"), "w") as tar:
                for _ in range(count):
                    n = len(sizes)
                    sizes[n] = size
                    info = tarfile.TarInfo(f"k{n}.bin")
                    info.size = size
                    tar.addfile(info, io.BytesIO(expected(n, size)))
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=1, shuffle=False,
                              batched=True)
        before = set(_gantry.batch_rings())
        n = shared = 0
        rings = []
        for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1):
            (key,) = b["__key__"]
            self.assertEqual(bytes(b["bin"][0]), expected(int(key[1:]), sizes[int(key[1:])]))
            shared += self.shared(b)
            n += 1
            rings.append(set(_gantry.batch_rings()) - before)
            first_there = os.path.exists(min(rings[0]))  # while the worker runs
            del b  # the loop holds one batch at a time
        self.assertEqual(n, 154)
        return n, shared, rings, first_there

    def test_a_worker_whose_batches_outgrow_its_ring_moves_to_a_larger_one(self):
        # The ring is sized from a worker's first batch, here 64 KiB (the least), which holds
        # none of the later batches: before this they all crossed the pipe.
        n, shared, rings, first_there = self.read_growing_batches()
        self.assertEqual(shared, n)  # 4 before this change
        (first,) = rings[0]
        self.assertEqual(len(rings[-1]), 1)
        (last,) = rings[-1]
        self.assertNotEqual(first, last)
        # The outgrown ring, while the worker still ran: its file removed by the worker once
        # none of its blocks was held, and forgotten here.
        self.assertFalse(first_there)

    def test_a_ring_that_cannot_grow_leaves_the_larger_batches_to_the_pipe(self):
        # No larger ring allowed (the forked worker inherits the patched limit): the first
        # ring stays, and the batches it cannot hold come through the pipe, whole and in order.
        self.addCleanup(setattr, gantry_data, "_RING_MAX", gantry_data._RING_MAX)
        gantry_data._RING_MAX = _gantry.MIN_BATCH_RING
        n, shared, rings, first_there = self.read_growing_batches()
        self.assertEqual(shared, 4)
        self.assertEqual(rings[0], rings[-1])
        self.assertTrue(first_there)

    def test_a_ring_sized_by_shared_batches_is_not_grown_for_another_dataset(self):
        # One ring per worker process: a second dataset read there with the default size (and
        # batches far larger) used to grow a ring the first had sized on purpose.
        def child():
            fixed = gantry_data._worker_ring(1000, size=_gantry.MIN_BATCH_RING)
            later = gantry_data._worker_ring(100000, size=None)
            same = later is fixed
            for ring in {id(r): r for r in (fixed, later) if r is not None}.values():
                os.unlink(ring.path)  # in_forked_child's os._exit skips their finalizers
            return 0 if fixed is not None and same else 1
        self.assertEqual(in_forked_child(child), 0)

    def test_batches_the_loop_holds_are_never_written_over(self):
        # Batches of 3 x 4000 bytes: a ring of 64 KiB holds 5 of them (64 bytes of header each).
        write_bins(self.path("bins"), 10, 6, 4000)
        held = list(self.loader(workers=1, shared_batches="64K"))
        self.assertEqual(len(held), 20)
        shared = [self.shared(b) for b in held]
        # The ring full of held batches, the rest came through the pipe.
        self.assertEqual(sum(shared), 5, shared)
        self.check(held, 4000)

    def test_a_forked_child_dropping_inherited_batches_leaves_them_held(self):
        write_bins(self.path("bins"), 10, 6, 4000)
        it = iter(self.loader(workers=1, shared_batches="64K"))
        next(it)  # sizes the ring
        held = [next(it)]
        self.assertTrue(self.shared(held[0]))

        def drop():
            held.clear()
            gc.collect()
            return 0
        self.assertEqual(in_forked_child(drop), 0)
        rest = list(it)
        # Had the child's drop counted, the parent's batch would have been written over.
        self.check(held, 4000)
        self.check(rest, 4000)

    def test_a_worker_transform_may_keep_copy_or_pickle_its_batch(self):
        write_bins(self.path("bins"), 6, 6, 2000)
        kept = []  # in each worker

        def transform(batch):
            kept.append(batch)
            pickle.dumps(batch)  # a descriptor never delivered: its block stays held
            return copy.deepcopy(batch)
        got = list(self.loader(transform=transform, packed=True))
        self.assertEqual(len(got), 12)
        self.check(got, 2000)
        self.assertGreater(sum(map(self.shared, got)), 0)

    def test_pickled_in_the_training_process_a_batch_carries_its_bytes(self):
        write_bins(self.path("bins"), 4, 6, 2000)
        batch = [b for b in self.loader(workers=1) if self.shared(b)][0]
        again = pickle.loads(pickle.dumps(batch))
        self.assertIsInstance(again.block, bytes)
        self.assertEqual(again.block, batch.block)
        self.assertEqual(again["bin"], batch["bin"])
        self.check([again], 2000)

    def test_spawned_workers_share_batches_too(self):
        write_bins(self.path("bins"), 4, 6, 2000)
        ds = StreamingDataset(self.path("bins"), decode=False, batch_size=3, window=6, seed=2,
                              batched=True)
        got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                               multiprocessing_context="spawn"))
        self.assertEqual(sum(map(self.shared, got)), len(got))
        self.check(got, 2000)

    def test_a_killed_workers_ring_is_removed_by_the_next_ring_made(self):
        write_bins(self.path("bins"), 4, 6, 2000)
        gone = subprocess.Popen(["true"])
        gone.wait()
        stale = f"/dev/shm/gantry-batches-{gone.pid}-000000000000"
        with open(stale, "wb") as f:
            f.write(b"x")
        self.addCleanup(lambda: os.path.exists(stale) and os.unlink(stale))
        list(self.loader(workers=1))
        self.assertFalse(os.path.exists(stale))
