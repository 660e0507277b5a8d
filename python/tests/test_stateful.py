"""gantry.checkpoint and PyTorch DCP's conventions: objects with state_dict()/load_state_dict()
(the Stateful protocol) are saved and loaded through them, and a save handle is a future."""

import os
import shutil
import threading
import unittest

import torch

import gantry.checkpoint as ckpt
from util import TempDirTestCase

torch.set_num_threads(1)


def model_and_optimizer(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def train(model, opt, steps):
    gen = torch.Generator().manual_seed(7)
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(16, 4, generator=gen)).pow(2).mean()
        loss.backward()
        opt.step()


class LoaderState:
    """Stands in for a data loader: plain state through state_dict()/load_state_dict()."""

    def __init__(self, epoch=0, consumed=0):
        self.epoch, self.consumed = epoch, consumed
        self.loads = 0

    def state_dict(self):
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, sd):
        self.loads += 1
        self.epoch, self.consumed = sd["epoch"], sd["consumed"]


class StatefulTest(TempDirTestCase):

    def setUp(self):
        super().setUp()
        self.c = ckpt.Checkpointer(self.path("root"), local=self.path("local"))

    def tearDown(self):
        self.c.close()
        super().tearDown()

    def assert_same_module(self, a, b):
        for (na, ta), (nb, tb) in zip(a.state_dict().items(), b.state_dict().items()):
            self.assertEqual(na, nb)
            self.assertTrue(torch.equal(ta, tb), na)

    def test_modules_optimizers_and_custom_objects_round_trip(self):
        model, opt = model_and_optimizer(1)
        train(model, opt, 3)
        loader = LoaderState(epoch=2, consumed=12345)
        self.c.save({"model": model, "optim": opt, "data": [loader], "step": 3}, 3).wait()

        model2, opt2 = model_and_optimizer(2)  # other weights, no optimizer state yet
        loader2 = LoaderState()
        into = {"model": model2, "optim": opt2, "data": [loader2], "step": 0}
        state = self.c.load(into=into)
        self.assertIs(state, into)
        # The objects stay in their places, restored through load_state_dict.
        self.assertIs(state["model"], model2)
        self.assertIs(state["optim"], opt2)
        self.assertIs(state["data"][0], loader2)
        self.assertEqual(state["step"], 3)
        self.assertEqual((loader2.epoch, loader2.consumed, loader2.loads), (2, 12345, 1))
        self.assert_same_module(model, model2)
        s1, s2 = opt.state_dict(), opt2.state_dict()
        self.assertEqual(sorted(s1["state"]), sorted(s2["state"]))
        for k in s1["state"]:
            for name in ("exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(s1["state"][k][name], s2["state"][k][name]))
        # Both continue identically: the restored optimizer really holds the moments.
        train(model, opt, 2)
        train(model2, opt2, 2)
        self.assert_same_module(model, model2)

    def test_the_whole_state_may_be_one_stateful_object(self):
        model, _ = model_and_optimizer(3)
        self.c.save(model, 1).wait()
        other, _ = model_and_optimizer(4)
        self.assertIs(self.c.load(into=other), other)
        self.assert_same_module(model, other)
        # Without `into`, the plain state dict comes back.
        plain = self.c.load()
        self.assertEqual(list(plain.keys()), list(model.state_dict().keys()))

    def test_save_does_not_change_the_callers_structure(self):
        loader = LoaderState(1, 2)
        state = {"data": loader, "nested": {"x": torch.ones(2)}}
        self.c.save(state, 1).wait()
        self.assertIs(state["data"], loader)
        self.assertEqual(self.c.load()["data"], {"epoch": 1, "consumed": 2})

    def test_a_failed_load_puts_the_objects_back(self):
        self.c.save({"model": torch.nn.Linear(2, 2)}, 1).wait()
        wrong = torch.nn.Linear(3, 3)  # shapes differ: the load fails
        into = {"model": wrong}
        with self.assertRaises(ValueError):
            self.c.load(into=into)
        self.assertIs(into["model"], wrong)

    def test_stateful_inside_a_tuple_is_refused_on_load(self):
        self.c.save({"t": (LoaderState(),)}, 1).wait()
        with self.assertRaisesRegex(TypeError, "inside a tuple"):
            self.c.load(into={"t": (LoaderState(),)})


class FutureTest(TempDirTestCase):

    def test_result_and_callbacks_of_a_good_save(self):
        with ckpt.Checkpointer(self.path("root"), local=self.path("local")) as c:
            handle = c.save({"x": torch.arange(1000.0)}, 1)
            called = []
            done = threading.Event()

            def cb(h):
                called.append((h is handle, h.done()))
                done.set()

            handle.add_done_callback(cb)
            stats = handle.result(timeout=60)
            self.assertEqual(stats["bytes_total"], 4000)
            self.assertTrue(done.wait(60))
            self.assertEqual(called, [(True, True)])
            self.assertIsNone(handle.exception())
            self.assertFalse(handle.cancel())
            self.assertFalse(handle.cancelled())
            self.assertFalse(handle.running())
            # Added after the end: called at once, in this thread.
            late = []
            handle.add_done_callback(lambda h: late.append(threading.current_thread()))
            self.assertEqual(late, [threading.current_thread()])

    def test_exception_of_a_failed_save(self):
        root = self.path("root")
        with ckpt.Checkpointer(root, local=self.path("local")) as c:
            # The durable root becomes a file: the background drain fails.
            shutil.rmtree(root)
            with open(root, "w") as f:
                f.write("not a directory")
            handle = c.save({"x": torch.ones(8)}, 1)
            errors = []
            got = threading.Event()
            handle.add_done_callback(lambda h: (errors.append(h.exception()), got.set()))
            self.assertTrue(got.wait(60))
            self.assertIsInstance(errors[0], ckpt.CheckpointError)
            self.assertIn("not a directory", str(errors[0]).lower())
            self.assertIsInstance(handle.exception(), ckpt.CheckpointError)
            with self.assertRaises(ckpt.CheckpointError):
                handle.result()
            os.remove(root)

    def test_a_callback_that_raises_does_not_stop_the_others(self):
        with ckpt.Checkpointer(self.path("root"), local=self.path("local")) as c:
            handle = c.save({"x": torch.ones(4)}, 1)
            ran = []
            finished = threading.Event()

            def bad(h):
                raise RuntimeError("callback bug")

            with self.assertLogs("gantry.checkpoint", level="ERROR") as logs:
                handle.add_done_callback(bad)
                handle.add_done_callback(lambda h: (ran.append(True), finished.set()))
                handle.wait()
                self.assertTrue(finished.wait(60))
            self.assertEqual(ran, [True])
            self.assertIn("callback bug", "\n".join(logs.output))


if __name__ == "__main__":
    unittest.main()
