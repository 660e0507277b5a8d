"""gantry.data across epochs with persistent DataLoader workers (persistent_workers=True): each
worker keeps its copy of the dataset from the first epoch, yet set_epoch(), load_state_dict()
and a changed seed in the training process decide its next epoch's order, exactly as they do
for workers started afresh."""

import unittest

import torch
import torch.utils.data

from test_data_batched import WdsTestCase


def keys(loader):
    return [k for batch in loader for k in batch["__key__"]]


class PersistentWorkersTest(WdsTestCase):

    def loader(self, ds, persistent, context=None):
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                           persistent_workers=persistent,
                                           multiprocessing_context=context)

    def fresh(self, epoch, state=None, **kw):
        """The order of `epoch` (or of `state`) through workers started for it."""
        ds = self.dataset(batch_size=4, batched=True, **kw)
        if state is not None:
            ds.load_state_dict(state)
        else:
            ds.set_epoch(epoch)
        return keys(self.loader(ds, persistent=False))

    def test_set_epoch_reaches_persistent_workers(self):
        for context in (None, "spawn"):
            ds = self.dataset(batch_size=4, batched=True)
            loader = self.loader(ds, persistent=True, context=context)
            seen = []
            for epoch in range(3):
                ds.set_epoch(epoch)
                got = keys(loader)
                self.assertEqual(got, self.fresh(epoch), (context, epoch))
                seen.append(got)
            self.assertEqual(len(seen[0]), 107)
            self.assertNotEqual(seen[0], seen[1])  # a new shuffle each epoch
            self.assertNotEqual(seen[1], seen[2])

    def test_a_state_loaded_after_the_workers_started_is_resumed_there(self):
        ds = self.dataset(batch_size=4, batched=True)
        loader = self.loader(ds, persistent=True)
        self.assertEqual(keys(loader), self.fresh(0))  # the workers exist from here on
        source = self.dataset(batch_size=4, batched=True, seed=11)
        source.set_epoch(2)
        state = source.state_dict(num_samples=36)  # mid-epoch, with another seed
        ds.load_state_dict(state)
        got = keys(loader)
        self.assertEqual(got, self.fresh(None, state=state))
        self.assertEqual(len(got), 107 - 36)

    def test_a_seed_changed_after_the_workers_started_is_used_there(self):
        ds = self.dataset(batch_size=4, batched=True)
        loader = self.loader(ds, persistent=True)
        first = keys(loader)
        ds.seed = 9
        got = keys(loader)
        self.assertEqual(got, self.fresh(0, seed=9))
        self.assertNotEqual(got, first)

    def test_a_seed_beyond_int64_reaches_the_workers_intact(self):
        big = (1 << 63) + 5  # a uint64 seed, as random.getrandbits(64) gives
        ds = self.dataset(batch_size=4, batched=True, seed=big)
        loader = self.loader(ds, persistent=True)
        self.assertEqual(keys(loader), self.fresh(0, seed=big))
        ds.set_epoch(1)
        self.assertEqual(keys(loader), self.fresh(1, seed=big))

    def test_what_the_order_cannot_take_is_refused_at_once(self):
        from gantry.data import InvalidArgumentError
        for kw in ({"seed": -1}, {"seed": 1 << 64}, {"window": -1}, {"epoch": -2},
                   {"batch_size": 0}, {"batch_size": 1 << 64}, {"shard_samples": [-1]}):
            with self.assertRaises(InvalidArgumentError, msg=kw):
                self.dataset(**kw)
        ds = self.dataset(batch_size=4)
        with self.assertRaises(InvalidArgumentError):
            ds.set_epoch(-1)
        state = ds.state_dict(num_samples=8)
        with self.assertRaises(InvalidArgumentError):
            ds.load_state_dict(dict(state, seed=3, epoch=-1))
        self.assertEqual(ds.seed, 5)  # a bad state changes nothing
        self.assertEqual(ds.state_dict(num_samples=8), state)


if __name__ == "__main__":
    unittest.main()
