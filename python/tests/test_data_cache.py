"""gantry.data.StreamingDataset with a node-local shard cache: one cached copy shared by separate
processes, a cache smaller than the dataset, a damaged cached shard fetched again, a damaged or
missing source shard failing loudly by name (or served from a fallback source), stats(), and
the DataLoader workers' counts in the training process's Prometheus registry."""

import multiprocessing
import os
import shutil
import subprocess
import threading
import time
import unittest

from util import SOURCE_DIR, TempDirTestCase

from gantry import data as gdata
from gantry.data import StreamingDataset

HASHED = os.path.join(SOURCE_DIR, "testdata", "datasets", "mds", "hashed")  # sha1 + xxh64


def shard_files(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith("shard."))


def cached_files(cache_dir):
    out = []
    for root, _, files in os.walk(cache_dir):
        out.extend(os.path.join(root, f) for f in files if f[:1].isdigit())
    return sorted(out)


def flip_byte(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def read_with_two_workers(ds, context):
    """The sorted keys of one epoch of `ds` through a DataLoader with 2 workers."""
    import torch.utils.data
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list,
                                         multiprocessing_context=context)
    return sorted(s["__key__"] for batch in loader for s in batch)


def read_in_child(url, cache_dir, job, start, results):
    """A separate process: waits for the start signal, reads the epoch, reports keys and stats."""
    start.wait()
    ds = StreamingDataset(url, cache_dir=cache_dir, job=job, decode=False, seed=1)
    keys = [s["__key__"] for s in ds]
    results.put((sorted(keys), ds.stats()))


class SharedCacheTest(TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.data = self.path("data")
        shutil.copytree(HASHED, self.data)
        self.shards = shard_files(self.data)
        self.dataset_bytes = sum(os.path.getsize(os.path.join(self.data, f))
                                 for f in self.shards)
        self.keys = sorted(s["__key__"] for s in StreamingDataset(self.data, decode=False,
                                                                  shuffle=False))

    def test_processes_share_one_cached_copy(self):
        ctx = multiprocessing.get_context("spawn")
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=read_in_child,
                             args=(self.data, self.path("cache"), "shared", start, results))
                 for _ in range(3)]
        for p in procs:
            p.start()
        start.set()  # all at once, so they race for the same shards
        got = [results.get(timeout=90) for _ in procs]
        for p in procs:
            p.join(timeout=30)
            self.assertEqual(p.exitcode, 0)
        for keys, _ in got:
            self.assertEqual(keys, self.keys)
        stats = [s for _, s in got]
        # Each shard came from the durable tier once on the node; the others read the cache.
        self.assertEqual(sum(s["shards_durable"] for s in stats), len(self.shards))
        self.assertEqual(sum(s["bytes_durable"] for s in stats), self.dataset_bytes)
        self.assertEqual(sum(s["shards_cache"] for s in stats), 2 * len(self.shards))
        self.assertEqual(len(cached_files(self.path("cache"))), len(self.shards))

    def test_small_cache_reads_each_shard_once_per_epoch_within_budget(self):
        largest = max(os.path.getsize(os.path.join(self.data, f)) for f in self.shards)
        budget = 3 * (largest + 16)
        self.assertLess(budget, self.dataset_bytes)
        ds = StreamingDataset(self.data, cache_dir=self.path("cache"), cache_bytes=budget,
                              job="small", decode=False, window=100, read_ahead=1)
        for epoch in range(2):
            ds.set_epoch(epoch)
            before = ds.stats()
            self.assertEqual(sorted(s["__key__"] for s in ds), self.keys)
            after = ds.stats()
            read = (after["shards_durable"] + after["shards_cache"]
                    - before["shards_durable"] - before["shards_cache"])
            self.assertEqual(read, len(self.shards))
            self.assertEqual(after["uncached"], 0)
            self.assertLessEqual(sum(os.path.getsize(f)
                                     for f in cached_files(self.path("cache"))), budget)
        self.assertGreater(ds.stats()["evictions"], 0)

    def test_cache_from_the_environment(self):
        os.environ["GANTRY_DATA_CACHE_DIR"] = self.path("envcache")
        os.environ["GANTRY_DATA_CACHE_BYTES"] = "1G"
        try:
            ds = StreamingDataset(self.data, job="env", decode=False)
        finally:
            del os.environ["GANTRY_DATA_CACHE_DIR"]
            del os.environ["GANTRY_DATA_CACHE_BYTES"]
        self.assertEqual(ds.cache_dir, self.path("envcache"))
        self.assertEqual(ds.cache_bytes, 1 << 30)
        list(ds)
        self.assertEqual(len(cached_files(self.path("envcache"))), len(self.shards))
        with self.assertRaises(gdata.InvalidArgumentError):
            StreamingDataset(self.data, cache_bytes="lots")

    def test_cache_inside_the_dataset_folder_is_refused(self):
        # Its copies would be listed as more shards at the next open: every sample twice.
        before = sorted(os.listdir(self.data))
        for cache in (self.data, os.path.join(self.data, "cache")):
            with self.assertRaises(gdata.InvalidArgumentError):
                list(StreamingDataset(self.data, cache_dir=cache, decode=False))
        self.assertEqual(sorted(os.listdir(self.data)), before)
        ds = StreamingDataset(self.data, cache_dir=self.data + "-cache", decode=False)
        self.assertEqual(sorted(s["__key__"] for s in ds), self.keys)

    def test_damaged_cached_shard_is_fetched_again(self):
        ds = StreamingDataset(self.data, cache_dir=self.path("cache"), job="damaged-cache",
                              decode=False)
        first = [s["__key__"] for s in ds]
        flip_byte(cached_files(self.path("cache"))[2], 100)
        second = [s["__key__"] for s in ds]
        self.assertEqual(second, first)
        stats = ds.stats()
        self.assertEqual(stats["cache_damaged"], 1)
        self.assertEqual(stats["shards_durable"], len(self.shards) + 1)
        self.assertEqual(stats["shards_cache"], len(self.shards) - 1)

    def test_damaged_source_shard_is_data_loss_naming_it_or_read_from_fallback(self):
        mirror = self.path("mirror")
        shutil.copytree(self.data, mirror)
        flip_byte(os.path.join(self.data, "shard.00003.mds"), 500)  # same size: the hash tells
        ds = StreamingDataset(self.data, cache_dir=self.path("cache"), job="damaged-source",
                              decode=False, shuffle=False)
        with self.assertRaises(gdata.DataLossError) as caught:
            list(ds)
        self.assertIn("shard.00003.mds", str(caught.exception))
        self.assertIn("hash mismatch", str(caught.exception))
        ds = StreamingDataset(self.data, cache_dir=self.path("cache"), job="damaged-source",
                              decode=False, fallback_urls=[mirror])
        self.assertEqual(sorted(s["__key__"] for s in ds), self.keys)
        self.assertEqual(ds.stats()["source_damaged"], 2)  # once failing, once before the mirror

    def skip_without_shared_memory(self):
        if not os.access(gdata._SHM, os.W_OK):
            self.skipTest(f"{gdata._SHM} is not writable")
        st = os.statvfs(gdata._SHM)
        if st.f_bavail * st.f_frsize // 4 < gdata._WORKER_CACHE_MIN:
            self.skipTest(f"{gdata._SHM} has too little free space for a workers' cache")

    def test_too_little_shared_memory_means_no_workers_cache(self):
        """Where a quarter of /dev/shm's free space is under the minimum (a container's 64 MiB),
        the workers fetch for themselves: no folder is made."""
        _, url = self.start_agent(self.data)
        before = set(os.listdir(gdata._SHM)) if os.path.isdir(gdata._SHM) else set()
        saved = gdata._WORKER_CACHE_MIN
        gdata._WORKER_CACHE_MIN = 1 << 62
        try:
            ds = StreamingDataset(url)
        finally:
            gdata._WORKER_CACHE_MIN = saved
        self.assertIsNone(ds._worker_cache)
        after = set(os.listdir(gdata._SHM)) if os.path.isdir(gdata._SHM) else set()
        mine = f"gantry-workers-{os.getpid()}-"  # other processes' come and go meanwhile
        self.assertEqual([f for f in after - before if f.startswith(mine)], [])

    def test_workers_share_one_fetch_of_each_remote_shard(self):
        """Without a cache_dir, the DataLoader workers of a remote dataset fetch each shard once
        between them, through a private cache in /dev/shm that goes with the dataset; with
        share_fetches=False each fetches the shards it reads from (all of them here)."""
        import gc
        self.skip_without_shared_memory()
        _, url = self.start_agent(self.data)
        for context in ("fork", "spawn"):
            for share in (True, False):
                with self.subTest(context=context, share=share):
                    ds = StreamingDataset(url, job=f"share-{context}-{share}", decode=False,
                                          batch_size=4, share_fetches=share)
                    folder = ds._worker_cache[0] if share else None
                    if share:
                        self.assertTrue(os.path.isdir(folder))
                        self.assertTrue(os.path.basename(folder).startswith(
                            f"gantry-workers-{os.getpid()}-"))
                    else:
                        self.assertIsNone(ds._worker_cache)
                    self.assertEqual(read_with_two_workers(ds, context), self.keys)
                    s = ds.stats()
                    # http:// sources count as peers (docs/data.md).
                    if share:
                        self.assertEqual(s["shards_peer"], len(self.shards))
                        self.assertEqual(s["bytes_peer"], self.dataset_bytes)
                        self.assertGreater(s["bytes_cache"], 0)
                        # The workers exited; the folder is the dataset's until it goes.
                        self.assertTrue(os.path.isdir(folder))
                    else:
                        self.assertEqual(s["shards_peer"], 2 * len(self.shards))
                        self.assertEqual(s["bytes_cache"], 0)
                    del ds
                    gc.collect()
                    if share:
                        self.assertFalse(os.path.exists(folder))
        # Without workers the process reads alone: no cache is used (nothing to share).
        ds = StreamingDataset(url, job="share-none", decode=False)
        self.assertEqual(sorted(x["__key__"] for x in ds), self.keys)
        self.assertEqual(ds.stats()["bytes_cache"], 0)
        self.assertEqual(os.listdir(ds._worker_cache[0]), [])
        # A local dataset is mapped, shared already: no private cache.
        self.assertIsNone(StreamingDataset(self.data)._worker_cache)

    def test_a_killed_processs_worker_cache_is_swept(self):
        """A process killed before it removed its workers' cache leaves the folder in /dev/shm
        (RAM); the next remote dataset removes such folders of this user's ended processes."""
        self.skip_without_shared_memory()
        _, url = self.start_agent(self.data)
        code = ("import os, sys; sys.path[:0] = sys.argv[2].split(':');"
                "from gantry.data import StreamingDataset;"
                "ds = StreamingDataset(sys.argv[1]); print(ds._worker_cache[0], flush=True);"
                "os.kill(os.getpid(), 9)")
        import sys
        r = subprocess.run([sys.executable, "-c", code, url, ":".join(sys.path)],
                           stdout=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, -9)
        left = r.stdout.strip()
        self.assertTrue(os.path.isdir(left), left)
        with open(os.path.join(left, "shard"), "wb") as f:
            f.write(b"x" * 1000)
        alive = StreamingDataset(url)  # this process's own folder stays
        self.assertFalse(os.path.exists(left))
        self.assertTrue(os.path.isdir(alive._worker_cache[0]))

    def test_peer_then_durable_fallbacks(self):
        """A damaged shard comes from a peer's gantry-agent; one the peer lacks, from the next
        source (the durable copy); bytes are counted by where they came from."""
        peer_root, durable = self.path("peer"), self.path("durable")
        shutil.copytree(self.data, durable)
        os.makedirs(peer_root)
        shutil.copy(os.path.join(self.data, "shard.00003.mds"), peer_root)  # the peer has one
        flip_byte(os.path.join(self.data, "shard.00003.mds"), 500)
        flip_byte(os.path.join(self.data, "shard.00006.mds"), 500)
        _, peer = self.start_agent(peer_root)
        ds = StreamingDataset(self.data, job="peer", decode=False,
                              fallback_urls=[peer, durable], share_fetches=False)
        self.assertEqual(sorted(s["__key__"] for s in ds), self.keys)
        size = lambda f: os.path.getsize(os.path.join(durable, f))
        stats = ds.stats()
        self.assertEqual(stats["source_damaged"], 2)
        self.assertEqual(stats["shards_peer"], 1)
        self.assertEqual(stats["bytes_peer"], size("shard.00003.mds"))
        self.assertEqual(stats["shards_durable"], len(self.shards) - 1)
        self.assertEqual(stats["bytes_durable"], self.dataset_bytes - size("shard.00003.mds"))

    def test_stats_gather_dataloader_workers(self):
        for context in ("fork", "spawn"):
            with self.subTest(context=context):
                cache = self.path("cache-" + context)
                ds = StreamingDataset(self.data, cache_dir=cache, job="workers-" + context,
                                      decode=False, batch_size=4)
                for epoch in range(2):
                    ds.set_epoch(epoch)
                    self.assertEqual(read_with_two_workers(ds, context), self.keys)
                    s = ds.stats()
                    self.assertEqual(s["samples"], (epoch + 1) * len(self.keys))
                    # Each shard came from the durable tier once on the node, in the first
                    # epoch; the second read only the cache.
                    self.assertEqual(s["shards_durable"], len(self.shards))
                    self.assertEqual(s["bytes_durable"], self.dataset_bytes)
                self.assertGreater(s["bytes_cache"], 0)
                self.assertGreater(s["samples_per_second"], 0)
                self.assertAlmostEqual(
                    s["cache_hit_ratio"],
                    s["bytes_cache"] / (s["bytes_cache"] + s["bytes_durable"]))
                copy = __import__("copy").deepcopy(ds)  # no workers being started: no sharing
                self.assertIsNone(copy._worker_stats)

    def test_workers_counts_reach_the_prometheus_registry(self):
        def value(text, family, labels):
            prefix = f"{family}{{{labels}}} "
            lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
            return float(lines[0][len(prefix):]) if lines else None

        for context in ("fork", "spawn"):
            with self.subTest(context=context):
                job = "scraped-" + context
                ds = StreamingDataset(self.data, cache_dir=self.path("cache-" + context), job=job,
                                      decode=False, batch_size=4)
                own = f'dataset="{self.data}",job="{job}"'
                workers = own + ',process="workers"'
                for epoch in range(2):
                    ds.set_epoch(epoch)
                    self.assertEqual(read_with_two_workers(ds, context), self.keys)
                    text = gdata.metrics_text()
                    self.assertEqual(text, gdata.metrics_text())  # folding twice adds nothing
                    s = ds.stats()
                    self.assertEqual(value(text, "gantry_data_samples_total", workers),
                                     (epoch + 1) * len(self.keys))
                    # The training process read nothing itself: its own series, if any, are 0.
                    self.assertIn(value(text, "gantry_data_samples_total", own), (None, 0))
                    self.assertEqual(
                        value(text, "gantry_data_bytes_total", workers + ',source="durable"'),
                        self.dataset_bytes)
                    self.assertEqual(
                        value(text, "gantry_data_bytes_total", workers + ',source="cache"'),
                        s["bytes_cache"])
                    self.assertAlmostEqual(
                        value(text, "gantry_data_stall_seconds_sum", workers), s["stall_seconds"])
                    self.assertAlmostEqual(
                        value(text, "gantry_data_samples_per_second", workers),
                        s["samples_per_second"])
                    waits = value(text, "gantry_data_stall_seconds_count", workers)
                    self.assertGreater(waits, 0)  # each worker waited for its first shard
                    self.assertEqual(
                        value(text, "gantry_data_stall_seconds_bucket", workers + ',le="+Inf"'),
                        waits)

                # Read again without asking for the text, then drop the dataset: what its
                # workers counted since the last fold still reaches the registry.
                ds.set_epoch(2)
                self.assertEqual(read_with_two_workers(ds, context), self.keys)
                del ds
                __import__("gc").collect()
                self.assertEqual(value(gdata.metrics_text(), "gantry_data_samples_total", workers),
                                 3 * len(self.keys))

    def test_a_fold_inside_a_fold_on_one_thread_does_not_deadlock(self):
        # The garbage collector may run a dataset's finaliser (which folds) on a thread that is
        # folding already, inside the fold's lock; a plain lock waited for itself forever.
        ds = StreamingDataset(self.data, job="reentrant", decode=False)
        ds._worker_stats[gdata._SUMMED.index("samples")] = 5.0  # as a worker would report
        done = threading.Event()

        def nested():
            with gdata._fold_lock:
                ds._fold_workers()
            done.set()

        threading.Thread(target=nested, daemon=True).start()
        self.assertTrue(done.wait(20), "a fold inside a fold deadlocked")
        self.assertIn(f'gantry_data_samples_total{{dataset="{self.data}",job="reentrant",'
                      f'process="workers"}} 5\n', gdata.metrics_text())

    def test_serve_metrics_serves_the_text_at_slash_metrics(self):
        import urllib.error
        import urllib.request
        ds = StreamingDataset(self.data, job="served", decode=False)
        self.assertEqual(sum(1 for _ in ds), len(self.keys))
        server = gdata.serve_metrics()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}"
            with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
                self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
                body = r.read().decode()
            self.assertIn(f'gantry_data_samples_total{{dataset="{self.data}",job="served"}} '
                          f'{len(self.keys)}\n', body)
            with self.assertRaises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(base + "/other", timeout=30)
            self.assertEqual(caught.exception.code, 404)
        finally:
            server.shutdown()
            server.server_close()

    def test_a_scrape_that_goes_quiet_is_dropped_and_others_are_served(self):
        import socket
        import urllib.request
        saved = gdata.METRICS_CLIENT_TIMEOUT
        gdata.METRICS_CLIENT_TIMEOUT = 0.3
        try:
            server = gdata.serve_metrics()
        finally:
            gdata.METRICS_CLIENT_TIMEOUT = saved
        try:
            port = server.server_address[1]
            quiet = socket.create_connection(("127.0.0.1", port), timeout=30)
            quiet.sendall(b"GET /metr")  # half a request line, then nothing
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                self.assertEqual(r.status, 200)  # served meanwhile
            # The server gives up on the quiet one: its end closes (EOF), well before the
            # client's own 30 s.
            t0 = time.monotonic()
            self.assertEqual(quiet.recv(1024), b"")
            self.assertLess(time.monotonic() - t0, 20)
            quiet.close()
        finally:
            server.shutdown()
            server.server_close()

    def test_missing_shard_is_not_found_naming_it(self):
        ds = StreamingDataset(self.data, decode=False, shuffle=False, job="missing")
        os.remove(os.path.join(self.data, "shard.00004.mds"))
        with self.assertRaises(gdata.NotFoundError) as caught:
            list(ds)
        self.assertIn("shard.00004.mds", str(caught.exception))

    def test_an_error_in_a_dataloader_worker_reaches_the_training_process(self):
        # A worker's error crosses to the training process pickled. Until the error classes
        # could be pickled (they were named after a module that does not exist), it was lost
        # on the way and the DataLoader ended the epoch early without a word: the samples from
        # the missing shard on were skipped.
        import torch.utils.data
        ds = StreamingDataset(self.data, decode=False, shuffle=False, job="missing-workers")
        os.remove(os.path.join(self.data, "shard.00004.mds"))
        got = []
        with self.assertRaises(gdata.NotFoundError) as caught:
            for sample in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1):
                got.append(sample)
        self.assertIn("shard.00004.mds", str(caught.exception))
        self.assertLess(len(got), len(ds))

    def test_every_error_class_pickles_as_itself(self):
        import pickle
        import gantry
        classes = [getattr(gdata._gantry, n) for n in dir(gdata._gantry) if n.endswith("Error")]
        self.assertIn(gdata.DataLossError, classes)
        for cls in classes:
            self.assertIs(pickle.loads(pickle.dumps(cls)), cls)
            self.assertIs(getattr(gantry, cls.__name__), cls)
            again = pickle.loads(pickle.dumps(cls("shard.00004.mds: gone")))
            self.assertIs(type(again), cls)
            self.assertEqual(again.args, ("shard.00004.mds: gone",))

    def test_stats_of_a_small_run(self):
        ds = StreamingDataset(self.data, cache_dir=self.path("cache"), job="stats",
                              decode=False, batch_size=4)
        empty = ds.stats()
        self.assertEqual(empty["samples"], 0)
        self.assertEqual(empty["cache_hit_ratio"], 0.0)
        n = sum(1 for _ in ds)
        s = ds.stats()
        self.assertEqual(s["samples"], n)
        self.assertEqual(s["bytes_durable"], self.dataset_bytes)
        self.assertEqual(s["bytes_cache"], 0)
        self.assertEqual(s["bytes_peer"], 0)
        self.assertEqual(s["shards_durable"], len(self.shards))
        ds.set_epoch(1)
        self.assertEqual(sum(1 for _ in ds), n)
        s = ds.stats()
        self.assertEqual(s["samples"], 2 * n)
        self.assertEqual(s["bytes_cache"], self.dataset_bytes)
        self.assertAlmostEqual(s["cache_hit_ratio"], 0.5)
        self.assertGreater(s["stall_seconds"], 0.0)
        self.assertLessEqual(s["stall_seconds"], s["active_seconds"])
        self.assertAlmostEqual(s["samples_per_second"], 2 * n / s["active_seconds"])
        text = gdata._gantry.metrics_text()
        self.assertIn(f'gantry_data_samples_total{{dataset="{self.data}",job="stats"}} {2 * n}',
                      text)


if __name__ == "__main__":
    unittest.main()
