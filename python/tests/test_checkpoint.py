"""gantry.checkpoint on one rank: round trips of every dtype and of real model and optimizer
state, plain values, asynchronous save, in-place load, step selection, and errors."""

import collections
import math
import os
import unittest

import numpy as np
import torch

import gantry
import gantry.checkpoint as ckpt
from util import TempDirTestCase

torch.set_num_threads(1)

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
                torch.complex128]
NUMPY_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
                np.uint8, np.bool_, np.complex64, np.complex128]


def random_tensor(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=gen, dtype=dtype)


def assert_same(test, a, b, path="state"):
    """Exact structural and bitwise equality (types, dict key order, dtypes, shapes, bytes)."""
    test.assertIs(type(a), type(b), f"{path}: {type(a)} vs {type(b)}")
    if isinstance(a, torch.Tensor):
        test.assertEqual(a.dtype, b.dtype, path)
        test.assertEqual(a.shape, b.shape, path)
        test.assertEqual(a.requires_grad, b.requires_grad, path)
        ab = a.detach().contiguous().reshape(-1).view(torch.uint8)
        bb = b.detach().contiguous().reshape(-1).view(torch.uint8)
        test.assertTrue(torch.equal(ab, bb), f"{path}: bytes differ")
    elif isinstance(a, np.ndarray):
        test.assertEqual(a.dtype, b.dtype, path)
        test.assertEqual(a.shape, b.shape, path)
        test.assertEqual(a.tobytes(), b.tobytes(), path)
    elif isinstance(a, np.generic):
        test.assertEqual(a.dtype, b.dtype, path)
        test.assertEqual(a.tobytes(), b.tobytes(), path)
    elif isinstance(a, dict):
        test.assertEqual(list(a.keys()), list(b.keys()), path)
        for k in a:
            assert_same(test, a[k], b[k], f"{path}[{k!r}]")
        test.assertEqual(getattr(a, "_metadata", None), getattr(b, "_metadata", None), path)
    elif isinstance(a, (list, tuple)):
        test.assertEqual(len(a), len(b), path)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(test, x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        test.assertEqual(a.hex(), b.hex(), path)  # nan, -0.0 and inf included
    else:
        test.assertEqual(a, b, path)


class CheckpointTestCase(TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.root = self.path("root")
        self.c = ckpt.Checkpointer(self.root, local=self.path("local"), job="test",
                                   chunk_size=64 << 10, host_buffer_bytes=4 << 20)

    def tearDown(self):
        self.c.close()
        super().tearDown()

    def round_trip(self, state, step=1):
        self.c.save(state, step).wait()
        return self.c.load(step)


class RoundTripTest(CheckpointTestCase):
    def test_every_torch_dtype_and_shape(self):
        gen = torch.Generator().manual_seed(1)
        state = {}
        for dtype in TORCH_DTYPES:
            name = str(dtype).removeprefix("torch.")
            state[name] = random_tensor((3, 70, 5), dtype, gen)  # several 64 KiB chunks for some
            state[name + "_0d"] = random_tensor((), dtype, gen)
            state[name + "_empty"] = random_tensor((0, 4), dtype, gen)
            state[name + "_1d"] = random_tensor((7,), dtype, gen)
        state["big"] = torch.randn(300, 257, generator=gen)  # ~300 KiB: many chunks
        loaded = self.round_trip(state)
        assert_same(self, state, loaded)

    def test_every_numpy_dtype(self):
        rng = np.random.default_rng(2)
        state = {}
        for dtype in NUMPY_DTYPES:
            a = (rng.standard_normal((4, 9)) * 100).astype(dtype)
            state[np.dtype(dtype).name] = a
            state[np.dtype(dtype).name + "_0d"] = np.array(a[1, 2])
            state[np.dtype(dtype).name + "_empty"] = np.zeros((2, 0, 3), dtype=dtype)
        state["big_endian"] = np.arange(10, dtype=">i4")
        state["scalars"] = [np.float32(1.5), np.int64(-3), np.bool_(True), np.uint16(7)]
        loaded = self.round_trip(state)
        assert_same(self, state, loaded)
        self.assertEqual(loaded["big_endian"].dtype.str, ">i4")

    def test_views_are_saved_by_value(self):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        c = torch.randn(5, dtype=torch.complex64)
        state = {"t": base.t(), "slice": base[1:3, ::2], "conj": c.conj(), "neg": c.conj().imag,
                 "np_t": np.arange(12).reshape(3, 4).T}
        loaded = self.round_trip(state)
        for k in state:
            expect = state[k]
            if isinstance(expect, torch.Tensor):
                expect = expect.resolve_conj().resolve_neg().contiguous()
                self.assertTrue(torch.equal(loaded[k], expect), k)
            else:
                np.testing.assert_array_equal(loaded[k], expect)

    def test_plain_values_and_nesting(self):
        state = collections.OrderedDict()
        state["none"] = None
        state["flags"] = (True, False)
        state["ints"] = [0, -1, 2**70, -(2**63)]
        state["floats"] = [1.5, -0.0, math.inf, -math.inf, math.nan, 1e-310, 0.1]
        state["text"] = "grüße /\\ \"quoted\""
        state["blob"] = b"\x00\xffbytes"
        state["complex"] = 1 + 2j
        state[7] = "int key"
        state[(1, "a")] = "tuple key"
        state[2.5] = "float key"
        state[None] = "None key"
        state["nested"] = {"list": [[], {}, (), [torch.ones(2)]], "tuple": (1, (2, (3,)))}
        state["dtype"] = torch.bfloat16
        state["size"] = torch.Size([2, 3])
        state["grad"] = torch.ones(3, requires_grad=True)
        od = collections.OrderedDict(a=1)
        od._metadata = {"": {"version": 1}}
        state["od"] = od
        loaded = self.round_trip(state)
        assert_same(self, state, loaded)
        self.assertTrue(math.isnan(loaded["floats"][4]))

    def test_model_and_adam_state_dict(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4), torch.nn.LayerNorm(4))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 16)).square().mean().backward()
            opt.step()
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 3}
        self.assertIn(0, state["optim"]["state"])  # int keys
        loaded = self.round_trip(state)
        assert_same(self, state, loaded)

        # The loaded state drives a fresh model and optimizer to the same next step.
        model2 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                     torch.nn.Linear(32, 4), torch.nn.LayerNorm(4))
        opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
        model2.load_state_dict(loaded["model"])
        opt2.load_state_dict(loaded["optim"])
        x = torch.randn(8, 16)
        for m, o in ((model, opt), (model2, opt2)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(p, q))

    def test_module_level_api_with_engine_options(self):
        state = {"w": torch.arange(5.0)}
        h = ckpt.save(state, step=4, root=self.path("other"), job="m")
        h.wait(timeout=60)
        self.assertTrue(h.done())
        self.assertEqual(h.stats["bytes_total"], 20)
        loaded = ckpt.load(root=self.path("other"), job="m")
        self.assertTrue(torch.equal(loaded["w"], state["w"]))
        self.assertEqual(ckpt.latest_step(root=self.path("other"), job="m"), 4)

    def test_configure_default(self):
        c = ckpt.configure(root=self.path("dflt"), job="d")
        try:
            ckpt.save({"x": np.arange(3)}, step=1).wait()
            self.assertIs(ckpt.default(), c)
            np.testing.assert_array_equal(ckpt.load()["x"], np.arange(3))
        finally:
            c.close()
            ckpt._default = None  # pylint: disable=protected-access

    def test_metadata_tags_and_listing(self):
        self.c.save({"a": torch.zeros(2)}, 10, tags=["best"], metadata={"loss": 0.5}).wait()
        self.c.save({"a": torch.ones(2)}, 20).wait()
        self.assertEqual(self.c.metadata(10), {"loss": 0.5})
        self.assertEqual(self.c.manifest(10).tags, ["best"])
        self.assertEqual(self.c.steps(), [10, 20])
        listed = self.c.list()
        self.assertEqual([c["step"] for c in listed], [10, 20])
        self.assertTrue(all(c["committed"] for c in listed))


class AsyncAndStepsTest(CheckpointTestCase):
    def test_save_snapshots_before_returning(self):
        gen = torch.Generator().manual_seed(3)
        # Larger than the host buffer pool, so the save pipelines through reused buffers.
        state = {f"t{i}": torch.randn(256, 1024, generator=gen) for i in range(6)}
        arr = np.arange(100000, dtype=np.float64)
        state["np"] = arr
        expect = {k: v.clone() for k, v in state.items() if isinstance(v, torch.Tensor)}
        expect["np"] = arr.copy()
        handle = self.c.save(state, 5)
        # The caller owns its tensors again: training would write into them now.
        for k, v in state.items():
            if isinstance(v, torch.Tensor):
                v.fill_(-1)
        arr[:] = -7
        handle.wait()
        loaded = self.c.load(5)
        for k, v in expect.items():
            if isinstance(v, torch.Tensor):
                self.assertTrue(torch.equal(loaded[k], v), k)
            else:
                np.testing.assert_array_equal(loaded[k], v)

    def test_incremental_save_writes_only_changes(self):
        gen = torch.Generator().manual_seed(5)
        state = {f"t{i}": torch.randn(64, 1024, generator=gen) for i in range(10)}  # 256 KiB each
        before = state["t3"].clone()
        first = self.c.save(state, 1)
        first.wait()
        self.assertEqual(first.stats["written_fraction"], 1.0)
        state["t3"].add_(1)  # 10% of the bytes change
        second = self.c.save(state, 2)
        second.wait()
        self.assertGreater(second.stats["written_fraction"], 0.0)
        self.assertLessEqual(second.stats["written_fraction"], 0.15)
        self.assertTrue(torch.equal(self.c.load(2)["t3"], before + 1))
        self.assertTrue(torch.equal(self.c.load(1)["t3"], before))

    def test_many_small_tensors_pack_into_few_chunks(self):
        gen = torch.Generator().manual_seed(6)
        dtypes = [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool]
        state = {f"p{i:05d}": random_tensor((i % 7,), dtypes[i % len(dtypes)], gen)
                 for i in range(5000)}  # 0 to 6 elements each, every dtype, empties included
        state["big"] = torch.randn(64, 1024, generator=gen)  # 256 KiB: chunks of its own
        total = sum(t.numel() * t.element_size() for t in state.values())
        handle = self.c.save(state, 1)
        handle.wait()
        files = sum(len(f) for _, _, f in os.walk(os.path.join(self.root, "chunks")))
        self.assertLessEqual(files, math.ceil(total / (64 << 10)) + 1)
        self.assertEqual(handle.stats["chunks_total"], files)
        assert_same(self, self.c.load(1), state)
        # The same state again: the same packs, nothing written.
        again = self.c.save(state, 2)
        again.wait()
        self.assertEqual(again.stats["chunks_written"], 0)
        assert_same(self, self.c.load(2), state)
        # Packing off: a chunk per non-empty tensor, read back the same by a packing reader.
        unpacked = ckpt.Checkpointer(self.path("root2"), job="test", chunk_size=64 << 10,
                                     pack_below_bytes=0)
        try:
            unpacked.save(state, 1).wait()
            files = sum(len(f) for _, _, f in os.walk(os.path.join(self.path("root2"), "chunks")))
            self.assertGreater(files, 1000)  # (identical tiny tensors share a chunk anyway)
        finally:
            unpacked.close()
        reader = ckpt.Checkpointer(self.path("root2"), job="test")
        try:
            assert_same(self, reader.load(1), state)
        finally:
            reader.close()

    def test_latest_and_explicit_steps(self):
        self.assertIsNone(self.c.latest_step())
        for step in (1, 2, 3):
            self.c.save({"v": torch.tensor(float(step)), "step": step}, step, durability="durable")
        self.c.wait_all()
        self.assertEqual(self.c.latest_step(), 3)
        self.assertEqual(self.c.load()["step"], 3)
        self.assertEqual(self.c.load("latest")["v"].item(), 3.0)
        self.assertEqual(self.c.load(2)["step"], 2)
        self.assertEqual(self.c.load(1)["v"].item(), 1.0)

    def test_durability_levels(self):
        for step, level in ((1, "local"), (2, "durable"), (3, "committed")):
            h = self.c.save({"x": torch.ones(10)}, step, durability=level)
            h.wait()
            self.assertTrue(h.done())
        self.c.wait_all()
        self.assertEqual(self.c.steps(), [1, 2, 3])
        with self.assertRaises(ValueError):
            self.c.save({"x": torch.ones(1)}, 4, durability="eventually")

    def test_in_place_load(self):
        gen = torch.Generator().manual_seed(4)
        saved = {"a": torch.randn(10, 20, generator=gen), "b": np.arange(6, dtype=np.int32),
                 "c": torch.randn(6, 4, generator=gen), "list": [torch.ones(3), 5],
                 "step": 9, "new": torch.arange(4)}
        self.c.save(saved, 1).wait()
        a = torch.zeros(10, 20)
        b = np.zeros(6, dtype=np.int32)
        c_base = torch.zeros(4, 6)
        c = c_base.t()  # a non-contiguous view: filled through a copy
        lst = [torch.zeros(3), 0, "extra"]
        into = {"a": a, "b": b, "c": c, "list": lst, "step": 0}
        a_ptr = a.data_ptr()
        out = self.c.load(1, into=into)
        self.assertIs(out, into)
        self.assertIs(out["a"], a)
        self.assertEqual(a.data_ptr(), a_ptr)
        self.assertTrue(torch.equal(a, saved["a"]))
        np.testing.assert_array_equal(b, saved["b"])
        self.assertTrue(torch.equal(c_base.t(), saved["c"]))
        self.assertIs(out["list"], lst)
        self.assertEqual(len(lst), 2)
        self.assertTrue(torch.equal(lst[0], torch.ones(3)))
        self.assertEqual(out["step"], 9)
        self.assertTrue(torch.equal(out["new"], saved["new"]))  # missing in `into`: added

    def test_in_place_load_into_model_parameters(self):
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 3)
        self.c.save({"model": model.state_dict()}, 1).wait()
        other = torch.nn.Linear(4, 3)
        self.c.load(1, into={"model": dict(other.named_parameters())})
        self.assertTrue(torch.equal(other.weight, model.weight))
        self.assertTrue(torch.equal(other.bias, model.bias))
        self.assertTrue(other.weight.requires_grad)


class HousekeepingTest(CheckpointTestCase):
    def test_verify_remove_gc_and_progress(self):
        c = ckpt.Checkpointer(self.path("hk"), job="hk", chunk_size=16 << 10, gc_grace_seconds=0)
        try:
            gen = torch.Generator().manual_seed(6)
            for step in (1, 2, 3):
                c.save({"w": torch.randn(64, 64, generator=gen)}, step).wait()
            report = c.verify(2)
            self.assertGreater(report["chunks"], 0)
            self.assertEqual((report["missing"], report["corrupt"]), (0, 0), report["errors"])
            c.remove(3)
            self.assertEqual(c.latest_step(), 2)
            gc = c.gc(keep_last=1)
            self.assertEqual(gc["removed_steps"], [1])
            self.assertGreater(gc["deleted_chunks"], 0)
            self.assertEqual(c.steps(), [2])
            calls = []
            loaded = c.load(2, progress=lambda done, total: calls.append((done, total)))
            self.assertEqual(loaded["w"].shape, (64, 64))
            self.assertTrue(calls)
            self.assertEqual(calls[-1][0], calls[-1][1])
            self.assertEqual(calls[-1][1], 64 * 64 * 4)
        finally:
            c.close()


    def test_a_damaged_manifest_is_listed_and_steps_and_gc_still_work(self):
        """Regression: one truncated manifest made list(), steps() and gc() raise."""
        c = ckpt.Checkpointer(self.path("dmg"), job="dmg", chunk_size=16 << 10,
                              gc_grace_seconds=0)
        try:
            gen = torch.Generator().manual_seed(7)
            for step in (1, 2, 3):
                c.save({"w": torch.randn(64, 64, generator=gen)}, step).wait()
            manifest = os.path.join(self.path("dmg"), "ckpt", "dmg", "%012d" % 1,
                                    "manifest.json")
            os.truncate(manifest, 100)
            listed = c.list()
            self.assertEqual([e["step"] for e in listed], [1, 2, 3])
            self.assertTrue(listed[0]["damaged"])
            self.assertFalse(listed[0]["committed"])
            self.assertIn("manifest.json", listed[0]["problem"])
            self.assertFalse(listed[1]["damaged"])
            self.assertEqual(c.steps(), [2, 3])
            gc = c.gc(keep_last=1)
            self.assertEqual(gc["removed_steps"], [2])
            self.assertEqual(len(gc["warnings"]), 1)
            self.assertIn("step 1 ", gc["warnings"][0])
            self.assertEqual(c.steps(), [3])
            self.assertEqual(c.load()["w"].shape, (64, 64))
            c.remove(1)
            self.assertEqual([e["step"] for e in c.list()], [3])
        finally:
            c.close()

    def test_a_damaged_latest_is_passed_over_with_a_warning(self):
        """Regression: latest_step() and load() trusted the latest pointer, so a damaged newest
        manifest made every load of the latest fail while older steps were fine."""
        c = ckpt.Checkpointer(self.path("dmglatest"), job="j", chunk_size=16 << 10)
        try:
            for step in (1, 2):
                c.save({"step": step, "w": torch.full((8,), float(step))}, step).wait()
            manifest = os.path.join(self.path("dmglatest"), "ckpt", "j", "%012d" % 2,
                                    "manifest.json")
            os.truncate(manifest, 100)
            with self.assertWarnsRegex(RuntimeWarning, "step 2.*damaged"):
                self.assertEqual(c.latest_step(), 1)
            with self.assertWarns(RuntimeWarning):
                self.assertEqual(c.load()["step"], 1)
        finally:
            c.close()

    def test_remove_the_newest_then_save_that_step_again(self):
        """Regression: remove(step) then save(step) on the same Checkpointer raised "not above
        the previous checkpoint's step"."""
        gen = torch.Generator().manual_seed(8)
        for step in (1, 2, 3):
            self.c.save({"w": torch.randn(32, 32, generator=gen)}, step).wait()
        self.c.remove(3)
        redo = {"w": torch.randn(32, 32, generator=gen)}
        self.c.save(redo, 3).wait()
        self.assertEqual(self.c.steps(), [1, 2, 3])
        assert_same(self, self.c.load(3), redo)
        # An older step under a newer checkpoint: refused, saying what to do.
        self.c.remove(2)
        with self.assertRaises(ValueError) as cm:
            self.c.save(redo, 2)
        self.assertIn("not above step 3", str(cm.exception))
        self.assertIn("remove every checkpoint from step 2 on", str(cm.exception))
        self.c.remove(3)
        self.c.save(redo, 2).wait()
        self.assertEqual(self.c.steps(), [1, 2])
        self.assertEqual(self.c.latest_step(), 2)


class ErrorTest(CheckpointTestCase):
    def test_unsupported_torch_dtype_names_the_path(self):
        q = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
        with self.assertRaises(ValueError) as cm:
            self.c.save({"model": {"layers": [torch.ones(1), q]}}, 1)
        self.assertIn("state['model']['layers'][1]", str(cm.exception))
        self.assertIn("quint8", str(cm.exception))

    def test_numpy_object_array_names_the_path(self):
        with self.assertRaises(ValueError) as cm:
            self.c.save({"x": {"obj": np.array([object()])}}, 1)
        self.assertIn("state['x']['obj']", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            self.c.save({"u16": np.zeros(3, dtype=np.uint16)}, 1)
        self.assertIn("state['u16']", str(cm.exception))
        self.assertIn("uint16", str(cm.exception))

    def test_unsupported_value_type(self):
        with self.assertRaises(TypeError) as cm:
            self.c.save({"fn": [1, print]}, 1)
        self.assertIn("state['fn'][1]", str(cm.exception))
        with self.assertRaises(TypeError):
            self.c.save({"s": {1, 2}}, 1)
        cyclic = []
        cyclic.append(cyclic)
        with self.assertRaises(ValueError):
            self.c.save({"c": cyclic}, 1)

    def test_shape_and_dtype_mismatch_on_in_place_load(self):
        self.c.save({"w": torch.zeros(4, 8)}, 1).wait()
        with self.assertRaises(ValueError) as cm:
            self.c.load(1, into={"w": torch.zeros(4, 9)})
        msg = str(cm.exception)
        self.assertIn("into['w']", msg)
        self.assertIn("[4, 8]", msg)
        self.assertIn("[4, 9]", msg)
        with self.assertRaises(ValueError) as cm:
            self.c.load(1, into={"w": torch.zeros(4, 8, dtype=torch.float64)})
        self.assertIn("float64", str(cm.exception))
        self.assertIn("float32", str(cm.exception))

    def test_tensor_missing_from_checkpoint(self):
        self.c.save({"w": torch.zeros(2)}, 1).wait()
        with self.assertRaises(ValueError) as cm:
            self.c.load(1, into={"w": torch.zeros(2), "b": torch.zeros(3)})
        self.assertIn("into['b']", str(cm.exception))

    def test_missing_steps(self):
        with self.assertRaises(ckpt.NotFoundError) as cm:
            self.c.load()
        self.assertIsInstance(cm.exception, FileNotFoundError)
        self.assertIn("no committed checkpoint", str(cm.exception))
        self.c.save({"w": torch.zeros(2)}, 1).wait()
        with self.assertRaises(KeyError) as cm:
            self.c.load(7)
        self.assertIsInstance(cm.exception, gantry.CheckpointError)
        self.assertIn("step 7", str(cm.exception))

    def test_steps_must_increase(self):
        self.c.save({"w": torch.zeros(2)}, 5).wait()
        with self.assertRaises(ValueError):
            self.c.save({"w": torch.zeros(2)}, 5)

    def test_bad_options(self):
        with self.assertRaises(TypeError):
            ckpt.Checkpointer(self.path("x"), chunk_sise=1)
        with self.assertRaises(ValueError):
            ckpt.Checkpointer(self.path("x"), job="a/b")
        env = os.environ.pop("GANTRY_CKPT_ROOT", None)
        try:
            with self.assertRaises(ValueError):
                ckpt.Checkpointer()
        finally:
            if env is not None:
                os.environ["GANTRY_CKPT_ROOT"] = env

    def test_tampered_manifest(self):
        self.c.save({"w": torch.zeros(2)}, 1).wait()
        manifest = os.path.join(self.root, "ckpt", "test", "%012d" % 1, "manifest.json")
        with open(manifest, "r+b") as f:
            text = f.read().replace(b'"step"', b'"stap"', 1)
            f.seek(0)
            f.write(text)
        fresh = ckpt.Checkpointer(self.root, job="test")
        try:
            with self.assertRaises(ckpt.CheckpointError):
                fresh.load(1)
        finally:
            fresh.close()


class ErrorClassTest(unittest.TestCase):
    """Each status code a caller acts on has its class, under the standard exception that says
    the same thing, so `except PermissionError` and `except ckpt.CheckpointError` both work."""

    def test_hierarchy(self):
        expected = {
            ckpt.InvalidArgumentError: ValueError,
            ckpt.NotFoundError: FileNotFoundError,
            ckpt.AlreadyExistsError: FileExistsError,
            ckpt.PermissionDeniedError: PermissionError,
            ckpt.UnavailableError: TimeoutError,
            ckpt.StorageError: OSError,
            ckpt.ResourceExhaustedError: ckpt.StorageError,
            ckpt.DataLossError: ckpt.StorageError,
            ckpt.EngineError: RuntimeError,
        }
        for cls, base in expected.items():
            self.assertTrue(issubclass(cls, base), cls)
            self.assertTrue(issubclass(cls, ckpt.CheckpointError), cls)
            self.assertIs(getattr(gantry, cls.__name__), cls)
        # Full is not forbidden, and neither is "damaged".
        self.assertFalse(issubclass(ckpt.ResourceExhaustedError, PermissionError))
        self.assertFalse(issubclass(ckpt.PermissionDeniedError, ckpt.StorageError))
        self.assertFalse(issubclass(ckpt.DataLossError, ckpt.ResourceExhaustedError))

    def test_a_root_the_os_refuses_is_permission_denied(self):
        # sysfs refuses new directories (EPERM, or EROFS where it is mounted read-only), even to
        # root: a real "not allowed" that needs no unprivileged user.
        if not os.path.isdir("/sys/fs"):
            self.skipTest("no /sys here")
        with self.assertRaises(ckpt.PermissionDeniedError) as cm:
            ckpt.Checkpointer("/sys/fs/gantry-test-root", job="test")
        self.assertIsInstance(cm.exception, PermissionError)
        self.assertIn("/sys/fs/gantry-test-root", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
