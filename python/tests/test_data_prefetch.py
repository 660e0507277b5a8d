"""gantry.data's prefetch thread: StreamingDataset(prefetch=N) and gantry.data.prefetch() give
exactly the items of the plain iteration, in order, read ahead on a thread; an error arrives
where its item would have; state_dict counts what the loop took, not what was read ahead; and
the thread ends when the iteration does, however it ends; around a DataLoader with workers, the
workers' pipe is widened."""

import collections
import fcntl
import gc
import os
import queue
import textwrap
import threading
import time
import unittest

import torch
import torch.utils.data

from test_data_batched import WdsTestCase
from util import in_forked_child, run_python

from gantry.data import (WORKER_PIPE_BYTES, EngineError, InvalidArgumentError, Prefetcher,
                         SampleBatch, _Queue, prefetch, widen_worker_pipe)

WAIT = 30  # seconds a test waits for the thread to do something it must do


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "gantry-prefetch"]


def keys(items):
    out = []
    for item in items:
        out.extend(item["__key__"] if isinstance(item, SampleBatch) else [item["__key__"]])
    return out


class Failing:
    """A transform that raises at the `at`-th call."""

    def __init__(self, at):
        self.at = at
        self.calls = 0

    def __call__(self, item):
        self.calls += 1
        if self.calls == self.at:
            raise ValueError(f"transform failed at call {self.at}")
        return item


class DatasetPrefetchTest(WdsTestCase):

    def test_the_same_items_in_the_same_order(self):
        for batched in (False, True):
            for batch in (1, 4, 200):
                for depth in (1, 2, 8):
                    want = list(self.dataset(batch_size=batch, batched=batched))
                    got = list(self.dataset(batch_size=batch, batched=batched, prefetch=depth))
                    where = (batched, batch, depth)
                    self.assertEqual(keys(got), keys(want), where)
                    self.assertEqual(len(keys(got)), sum(self.SIZES), where)
                    if batched:
                        self.assertEqual([len(b) for b in got], [len(b) for b in want], where)
                        self.assertEqual([[bytes(v) for v in b["bin"]] for b in got],
                                         [[bytes(v) for v in b["bin"]] for b in want], where)
                    else:
                        self.assertEqual([bytes(s["bin"]) for s in got],
                                         [bytes(s["bin"]) for s in want], where)
        self.assertEqual(prefetch_threads(), [])

    def test_reads_ahead_while_the_loop_holds_its_item(self):
        depth = 3
        ds = self.dataset(batch_size=4, batched=True, prefetch=depth)
        it = iter(ds)
        next(it)
        # The loop holds its first batch; the thread fills its queue of `depth` and reads one
        # more, which waits for room.
        want = 4 * (1 + depth + 1)
        t0 = time.monotonic()
        while ds.stats()["samples"] < want and time.monotonic() - t0 < WAIT:
            time.sleep(0.01)
        time.sleep(0.1)
        self.assertEqual(ds.stats()["samples"], want)  # and no further
        it.close()

    def test_state_dict_counts_what_the_loop_took_not_what_was_read_ahead(self):
        for batched in (False, True):
            full = keys(self.dataset(batch_size=4, batched=batched))
            ds = self.dataset(batch_size=4, batched=batched, prefetch=4)
            before = ds.stats()["samples"]
            it = iter(ds)
            taken = [next(it) for _ in range(3 if batched else 12)]  # three steps of 4
            t0 = time.monotonic()
            while ds.stats()["samples"] - before < 12 + 16 and time.monotonic() - t0 < WAIT:
                time.sleep(0.01)
            self.assertGreaterEqual(ds.stats()["samples"] - before, 12 + 16)  # read ahead
            state = ds.state_dict()
            it.close()
            resumed = self.dataset(batch_size=4, batched=batched)
            resumed.load_state_dict(state)
            self.assertEqual(keys(taken) + keys(resumed), full, batched)

    def test_an_error_arrives_after_the_items_before_it(self):
        for batched, at in ((False, 30), (True, 6)):
            plain = self.dataset(batch_size=4, batched=batched, transform=Failing(at))
            got_plain = []
            with self.assertRaisesRegex(ValueError, f"at call {at}"):
                for item in plain:
                    got_plain.append(item)
            ds = self.dataset(batch_size=4, batched=batched, transform=Failing(at), prefetch=3)
            got = []
            with self.assertRaisesRegex(ValueError, f"at call {at}"):
                for item in ds:
                    got.append(item)
            self.assertEqual(len(got), at - 1)
            self.assertEqual(keys(got), keys(got_plain))
        self.assertEqual(prefetch_threads(), [])

    def test_breaking_out_of_the_loop_ends_the_thread(self):
        ds = self.dataset(batch_size=2, prefetch=2)
        for i, _ in enumerate(ds):
            if i == 3:
                break
        gc.collect()
        for t in prefetch_threads():
            t.join(WAIT)
        self.assertEqual(prefetch_threads(), [])
        # and the dataset reads again from the start
        self.assertEqual(len(keys(ds)), sum(self.SIZES))

    def test_a_process_exits_with_an_iteration_left_open(self):
        # The iterator and its thread are alive when the interpreter ends: the exit must not
        # wait for the (daemon) thread, which may be frozen mid-item.
        script = textwrap.dedent(f"""
            import time
            from gantry.data import StreamingDataset, prefetch
            ds = StreamingDataset({self.path("ds")!r}, batch_size=2, prefetch=2, decode=False)
            it = iter(ds)
            next(it)
            slow = prefetch((time.sleep(0.05) or i for i in range(10 ** 6)), depth=1)
            next(slow)
            print("exiting", flush=True)
            """)
        r = run_python(["-c", script], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn("exiting", r.stdout)

    def test_a_negative_prefetch_is_refused(self):
        with self.assertRaises(InvalidArgumentError):
            self.dataset(prefetch=-1)

    def test_the_loops_wait_is_in_stats(self):
        ds = self.dataset(batch_size=4, prefetch=2)
        self.assertEqual(ds.stats()["prefetch_wait_seconds"], 0.0)
        list(ds)
        self.assertGreater(ds.stats()["prefetch_wait_seconds"], 0.0)  # the first batch, at least

    def test_around_a_dataloader_with_workers(self):
        ds = self.dataset(batch_size=4, batched=True)
        want = keys(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
        with prefetch(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2),
                      depth=2) as loader:
            got = keys(loader)
        self.assertEqual(got, want)
        self.assertEqual(len(got), sum(self.SIZES))


    def test_the_workers_pipe_is_widened(self):
        with open("/proc/sys/fs/pipe-max-size") as f:
            if int(f.read()) < WORKER_PIPE_BYTES and os.geteuid() != 0:
                self.skipTest("this machine's pipe-max-size is below 1 MiB")

        class Keep:  # hands prefetch() the DataLoader's iterator and keeps it for the test
            def __init__(self, loader):
                self.loader = loader

            def __iter__(self):
                self.it = iter(self.loader)
                return self.it

        def size(it):
            return fcntl.fcntl(it._worker_result_queue._reader.fileno(), fcntl.F_GETPIPE_SZ)

        ds = self.dataset(batch_size=4, batched=True)
        plain = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1))
        self.assertLess(size(plain), WORKER_PIPE_BYTES)  # what the DataLoader makes
        self.assertEqual(widen_worker_pipe(plain), WORKER_PIPE_BYTES)
        self.assertEqual(size(plain), WORKER_PIPE_BYTES)
        del plain
        keep = Keep(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
        with prefetch(keep, depth=2) as loader:
            self.assertEqual(size(keep.it), WORKER_PIPE_BYTES)
            self.assertEqual(len(keys(loader)), sum(self.SIZES))
        # Nothing to widen: no workers, or not a DataLoader at all.
        self.assertIsNone(widen_worker_pipe(iter(torch.utils.data.DataLoader(ds, batch_size=None))))
        self.assertIsNone(widen_worker_pipe(iter(range(3))))

    def test_batches_from_workers_land_in_reused_heap_blocks(self):
        # In a new process, whose allocator starts as any training process's does (the
        # thresholds set to glibc's initial 128 KiB: the imports may have moved them). A block
        # of batch size is a mapping of its own until prefetch() wraps a DataLoader with
        # workers (keep_memory=True, the default); neither keep_memory=False nor an iterable
        # without workers changes that.
        script = textwrap.dedent(f"""
            import ctypes
            import torch.utils.data
            from gantry import _native
            from gantry.data import StreamingDataset, prefetch
            _gantry = _native.load()
            libc = ctypes.CDLL(None)
            assert libc.mallopt(-3, 128 << 10) == 1 and libc.mallopt(-1, 128 << 10) == 1
            libc.malloc_trim(0)

            def mapped():  # is a fresh 24 MiB block a mapping of its own?
                before = _gantry.mapped_heap_blocks()
                block = bytearray(24 << 20)
                after = _gantry.mapped_heap_blocks()
                del block
                return after > before

            ds = StreamingDataset({self.path("ds")!r}, batch_size=4, batched=True, decode=False)
            print("new process", mapped())
            with prefetch(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1),
                          keep_memory=False) as loader:
                next(loader)
            print("keep_memory=False", mapped())
            with prefetch(ds) as loader:
                next(loader)
            print("no workers", mapped())
            workers = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
            with prefetch(workers) as loader:
                next(loader)
            print("workers", mapped())
            """)
        r = run_python(["-c", script], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(r.stdout.splitlines(), ["new process True", "keep_memory=False True",
                                                 "no workers True", "workers False"])


class CountingQueue(queue.SimpleQueue):
    """A thread's wake queue that notes each put() (a wake from the loop)."""

    def __init__(self, puts):
        super().__init__()
        self.puts = puts

    def put(self, item, block=True, timeout=None):
        self.puts.append(item)
        super().put(item)


class PrefetcherTest(unittest.TestCase):
    def test_reads_ahead_up_to_depth_and_no_further(self):
        made = []
        ahead = threading.Event()

        def source():
            for i in range(100):
                made.append(i)
                if len(made) == 4:
                    ahead.set()
                yield i

        p = Prefetcher(source(), depth=3)
        self.assertEqual(next(p), 0)
        # Without a thread nothing past item 0 would be made until next() asks.
        self.assertTrue(ahead.wait(WAIT))
        self.assertEqual(list(p), list(range(1, 100)))

    def test_read_ahead_stays_within_depth_and_room_needs_no_wake_from_the_loop(self):
        # At most depth chunks wait (and the thread holds one more, made, waiting for room);
        # the thread sees room on its own timer, so a loop that takes from a full queue never
        # wakes it (that wake cost the loop 15-30 us a time on a busy VM).
        depth = 12
        made = []

        def source():
            for i in range(1000):
                made.append(i)
                yield i

        def settled(want):
            # Waits for the thread to make `want` items (a slow machine may take a while),
            # then a little longer, so that one made too many shows too.
            t0 = time.monotonic()
            while len(made) < want and time.monotonic() - t0 < WAIT:
                time.sleep(0.01)
            time.sleep(0.1)
            return len(made)

        p = Prefetcher(source(), depth=depth)
        woken = []
        p._queue.wake = CountingQueue(woken)
        self.assertEqual(settled(depth + 1), depth + 1)
        for taken in range(1, 8):
            self.assertEqual(next(p), taken - 1)
            self.assertEqual(settled(taken + depth + 1), taken + depth + 1, taken)
        self.assertEqual(woken, [])
        self.assertEqual(list(p), list(range(7, 1000)))

    def test_a_loop_that_runs_low_wakes_a_thread_waiting_for_room(self):
        # The thread's timer grows while the loop takes nothing (an evaluation), here to a
        # minute; a loop that then takes fast wakes it once half of depth is left, so it does
        # not wait out the timer. Before that wake: a minute per refill.
        p = Prefetcher(iter(range(200)), depth=12)
        q = p._queue
        q.ROOM_WAIT_MIN = q.ROOM_WAIT_MAX = 60
        q.wake.put(None)  # a thread already waiting on its old timer starts the long one
        time.sleep(0.2)
        t = time.monotonic()
        self.assertEqual(list(p), list(range(200)))
        self.assertLess(time.monotonic() - t, WAIT)

    def test_the_thread_times_its_refill_from_the_loops_pace_and_recovers_from_a_pause(self):
        # A loop taking a chunk every 50 ms: the 8 takes that leave room for 8 take 0.4 s (the
        # bounds leave 0.1 s for this thread to be late on a busy machine).
        q = _Queue(32)  # refills 8 at a time
        q.made, q.took = 40, 8  # full: 32 wait, and 8 more takes leave room for 8
        q.took_at = time.perf_counter()
        q.seen = (0, q.took_at - 0.4)  # 8 takes in 0.4 s
        self.assertTrue(0.3 < q.room_timer() <= 0.4 + q.AFTER_TAKE)
        self.assertAlmostEqual(q.pace, 0.05)
        # A pause of a minute over the next 8 takes, then 8 more at 50 ms each.
        q.made, q.took, q.took_at = 48, 16, q.took_at + 60
        self.assertEqual(q.room_timer(), q.ROOM_WAIT_MAX)
        q.made, q.took, q.took_at = 56, 24, time.perf_counter()
        q.seen = (16, q.took_at - 0.4)
        # The pace again, not the pause's average (which would wait the longest, 0.5 s).
        self.assertTrue(0.3 < q.room_timer() <= 0.4 + q.AFTER_TAKE)
        self.assertAlmostEqual(q.pace, 0.05)

    def test_a_chunk_the_loop_waits_for_is_handed_over_with_the_gil(self):
        # The thread's put() of a chunk the loop waits for returns only once the loop has it and
        # the GIL: until then the thread would keep the GIL for its next item.
        q = _Queue(4)
        q.HAND_OVER_SECONDS = 60  # never gives up here
        q.taken.put(None)  # a word left from a hand-over that gave up: not this one's
        q.waiting = True  # as next() sets it while it waits
        put = threading.Event()
        t = threading.Thread(target=lambda: (q.put(["chunk"]), put.set()))
        t.start()
        self.assertEqual(q.ready.get(timeout=60), ["chunk"])
        self.assertFalse(put.wait(0.2))  # the thread waits for the loop's word
        q.waiting = False
        q.taken.put(None)
        self.assertTrue(put.wait(60))
        t.join()
        # A loop that took its chunk without waiting costs the thread nothing.
        q.put(["next"])
        self.assertEqual(q.ready.get_nowait(), ["next"])

    def test_a_loop_that_waits_for_each_item_gives_the_thread_its_word(self):
        def slow():
            for i in range(4):
                time.sleep(0.05)  # the loop is always ahead: every next() waits
                yield i
        p = Prefetcher(slow(), depth=2)
        p._queue.HAND_OVER_SECONDS = 3600  # a word never given would hold the thread this long
        t = time.monotonic()
        self.assertEqual(list(p), [0, 1, 2, 3])
        self.assertLess(time.monotonic() - t, WAIT)
        self.assertGreater(p.wait_seconds, 0)

    def test_items_the_loop_let_go_of_are_freed_on_the_thread(self):
        # Freeing a batch from DataLoader workers took 6-7 us of the loop's next(); the thread
        # frees what the loop is done with instead. The loop below keeps only the item in hand,
        # so every item but the last few is freed there (a thread that falls behind leaves the
        # oldest to next(), so the test asks for most, not all). Before: none.
        freed_by = []

        class Item:
            def __del__(self):
                freed_by.append(threading.current_thread().name)

        p = Prefetcher((Item() for _ in range(200)), depth=8)
        item = None
        for item in p:
            time.sleep(0.001)  # a training step that leaves the GIL
        del item
        p.close(WAIT)
        gc.collect()
        self.assertEqual(len(freed_by), 200)
        self.assertGreater(freed_by.count("gantry-prefetch"), 150, freed_by)

    def test_a_thread_that_does_not_come_back_leaves_few_items_unfreed(self):
        # The thread waits in the source, so it frees nothing: the loop then frees the oldest
        # itself, and at most 2 x group (here 6) of what it let go of stay alive.
        go_on = threading.Event()
        alive = set()

        class Item:
            def __init__(self, i):
                self.i = i
                alive.add(i)

            def __del__(self):
                alive.discard(self.i)

        def source():
            yield from (Item(i) for i in range(12))
            go_on.wait(WAIT)
            yield Item(12)

        p = Prefetcher(source(), depth=12)
        t0 = time.monotonic()
        while p._queue.ready.qsize() < 12 and time.monotonic() - t0 < WAIT:
            time.sleep(0.01)  # every item queued: the thread waits in the source from here
        for i in range(12):
            self.assertEqual(next(p).i, i)
        # The item in hand's chunk, and the 2 x group chunks before it.
        self.assertEqual(alive, set(range(12 - 2 * p._queue.group - 1, 12)))
        go_on.set()
        self.assertEqual([item.i for item in p], [12])

    def test_the_loop_and_the_thread_freeing_the_same_items_is_no_error(self):
        # Both free what the loop let go of: the thread all of it, the loop the oldest past
        # 2 x group. Each checks and then pops, and the GIL may pass to the other between the
        # two. Deques that empty themselves at the check play the other side's pop there.
        # Before: IndexError from next(), or from the thread as the loader's error.
        class EmptiedAfterLen(collections.deque):
            def __len__(self):
                n = super().__len__()
                if n > 2:  # past 2 x group at depth 4: the loop is about to pop
                    self.clear()
                return n

        p = Prefetcher(iter(range(40)), depth=4)
        p._queue.spent = EmptiedAfterLen()
        got = []
        for item in p:
            got.append(item)
            if len(got) % 8 == 0:
                time.sleep(0.01)  # the thread waits for room meanwhile, freeing nothing
        self.assertEqual(got, list(range(40)))

        class EmptiedAfterTruth(collections.deque):
            def __bool__(self):
                said = super().__len__() > 0
                self.clear()
                return said

        q = _Queue(4)
        q.spent = EmptiedAfterTruth([[1], [2]])
        q.free_spent()
        self.assertEqual(len(q.spent), 0)

    def test_items_the_loop_keeps_are_not_freed(self):
        kept = []
        for chunk in (1, 3):
            kept.clear()
            for item in Prefetcher((bytearray([i]) for i in range(100)), depth=4, chunk=chunk):
                kept.append(item)
                time.sleep(0.0005)
            self.assertEqual([bytes(b) for b in kept], [bytes([i]) for i in range(100)], chunk)

    def test_chunks_keep_the_order(self):
        for chunk in (1, 3, 7, 200):
            self.assertEqual(list(Prefetcher(iter(range(50)), depth=2, chunk=chunk)),
                             list(range(50)), chunk)

    def test_a_dropped_prefetcher_ends_its_thread_and_closes_its_generator(self):
        closed = threading.Event()

        def source():
            try:
                for i in range(10 ** 9):
                    yield i
            finally:
                closed.set()

        p = Prefetcher(source(), depth=2)
        next(p)
        del p
        gc.collect()
        self.assertTrue(closed.wait(WAIT))
        for t in prefetch_threads():
            t.join(WAIT)
        self.assertEqual(prefetch_threads(), [])

    def test_a_close_while_the_source_is_empty_ends_the_iteration(self):
        p = Prefetcher(iter(range(5)), depth=1)
        self.assertEqual(next(p), 0)
        p.close()
        with self.assertRaises(StopIteration):
            next(p)

    def test_a_close_from_another_thread_ends_a_next_waiting_for_an_item(self):
        release = threading.Event()

        def source():
            yield 0
            release.wait(WAIT)  # the thread is stuck making the next item
            yield 1

        p = Prefetcher(source(), depth=2)
        self.assertEqual(next(p), 0)
        got = []
        loop = threading.Thread(target=lambda: got.append(list(p)))
        loop.start()
        p.close(timeout=0)  # before or after the loop's next() began to wait: it ends either way
        loop.join(WAIT / 2)
        alive = loop.is_alive()
        release.set()
        self.assertFalse(alive, "next() kept waiting for an item after close()")
        self.assertEqual(got, [[]])

    def test_a_prefetcher_made_before_a_fork_raises_in_the_child(self):
        # Its thread is not in the child: next() there waited forever for the queue to fill
        # (an empty queue) or handed out items the parent hands out too (a full one).
        release = threading.Event()

        def stuck():
            yield 0
            release.wait(WAIT)
            yield 1

        empty = Prefetcher(stuck(), depth=2)
        full = Prefetcher(iter(range(100)), depth=4)
        self.assertEqual((next(empty), next(full)), (0, 0))
        while full._queue.ready.qsize() < 2:  # items waiting in its queue at the fork
            time.sleep(0.001)

        def child():
            for p in (empty, full):
                try:
                    next(p)
                    return 1
                except EngineError as e:
                    if "forked" not in str(e):
                        return 2
            return 0

        try:
            self.assertEqual(in_forked_child(child), 0)  # None: the child hung
        finally:
            release.set()
        self.assertEqual(list(empty), [1])  # the parent's iterations go on
        self.assertEqual(list(full), list(range(1, 100)))

    def test_bad_arguments(self):
        with self.assertRaises(InvalidArgumentError):
            Prefetcher(iter(()), depth=0)
        with self.assertRaises(InvalidArgumentError):
            Prefetcher(iter(()), chunk=0)


if __name__ == "__main__":
    unittest.main()
