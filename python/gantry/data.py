"""Streaming datasets for PyTorch: MosaicML Streaming MDS and WebDataset shards from any store
URL, read in one seeded global order that is the same on any number of ranks and DataLoader
workers and resumes mid-epoch in constant time (docs/data.md).

    from gantry.data import StreamingDataset
    ds = StreamingDataset("s3://bkt/train", batch_size=32, seed=7)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=4)
    for epoch in range(start_epoch, epochs):
        ds.set_epoch(epoch)
        for step, batch in enumerate(loader):
            ...
            state = ds.state_dict(num_samples=(step + 1) * 32)   # with the model's state
    # after a restart, on any world size:
    ds.load_state_dict(state)   # the same epoch, from the next unread sample

A sample is a dict: "__key__" and one entry per field (WebDataset) or column (MDS), decoded by
its extension or MDS encoding (see decode_field) unless decode=False; then `transform`, if
given, is applied to it.

Shards go through a node-local cache when one is configured (cache_dir, or the environment's
GANTRY_DATA_CACHE_DIR; its budget cache_bytes or GANTRY_DATA_CACHE_BYTES): fetched once per node
and shared by every process on it. stats() reports what the loader did (docs/data.md).
"""

import collections
import fcntl
import functools
import io
import json
import os
import queue as queue_module
import secrets
import shutil
import stat as stat_module
import sys
import threading
import time
import weakref
from multiprocessing import util as multiprocessing_util

from gantry import _native

_gantry = _native.load()

try:
    import torch
    import torch.utils.data
    _Base = torch.utils.data.IterableDataset
except ImportError:  # usable without torch, as a plain iterable
    torch = None
    _Base = object

DataLossError = _gantry.DataLossError
NotFoundError = _gantry.NotFoundError
InvalidArgumentError = _gantry.InvalidArgumentError
EngineError = _gantry.EngineError

__all__ = ["StreamingDataset", "SampleBatch", "prefetch", "Prefetcher", "widen_worker_pipe",
           "keep_batch_memory",
           "decode_field", "metrics_text", "serve_metrics", "DataLossError", "NotFoundError",
           "InvalidArgumentError", "EngineError"]

_TEXT = {"txt", "text", "transcript"}
_JSON = {"json", "jsn"}
_INT = {"cls", "cls2", "index", "inx", "id"}
_IMAGE = {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "webp", "bmp", "gif", "tif", "tiff"}
_NUMPY_SCALARS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "float32", "float64"}


def _pil_image(data):
    try:
        from PIL import Image
    except ImportError:
        return bytes(data)  # Pillow is optional: images stay encoded bytes
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _numpy():
    import numpy
    return numpy


def decode_field(name, encoding, data):
    """Decodes one field's stored bytes (bytes, or a memoryview of them).

    MDS columns go by their encoding: str, int (8 bytes little-endian), int8..uint64 and
    float16..float64 (a numpy scalar), ndarray:DTYPE:SHAPE (a numpy array), json, str_int,
    str_float, jpeg/png (a PIL image when Pillow is installed); bytes, pkl (never unpickled),
    pil and the variable ndarray encodings stay bytes. WebDataset fields go by their last
    extension: txt/text (str), json, cls/index/id (int), npy (numpy.load, no pickles), image
    extensions (PIL when installed); anything else stays bytes. A memoryview is read in place
    where the decoder can (text, numbers, arrays) and copied into bytes only where it must.
    """
    if encoding:
        if encoding == "str":
            return str(data, "utf-8")
        if encoding == "int":
            return int.from_bytes(data, "little", signed=True)
        if encoding in _NUMPY_SCALARS:
            return _numpy().frombuffer(data, dtype=encoding)[0]
        if encoding.startswith("ndarray:") and encoding.count(":") == 2:
            _, dtype, shape = encoding.split(":")
            dims = tuple(int(d) for d in shape.split(","))
            return _numpy().frombuffer(data, dtype=dtype).reshape(dims).copy()
        if encoding == "json":
            return json.loads(str(data, "utf-8"))
        if encoding == "str_int":
            return int(str(data, "utf-8"))
        if encoding == "str_float":
            return float(str(data, "utf-8"))
        if encoding in ("jpeg", "png"):
            return _pil_image(data)
        return bytes(data)
    ext = name.rsplit(".", 1)[-1]
    if ext in _TEXT:
        return str(data, "utf-8")
    if ext in _JSON:
        return json.loads(str(data, "utf-8"))
    if ext in _INT:
        return int(str(data, "utf-8").strip())
    if ext == "npy":
        return _numpy().load(io.BytesIO(data), allow_pickle=False)
    if ext in _IMAGE:
        return _pil_image(data)
    return bytes(data)


class SampleBatch:
    """A batch of samples, column-wise: what StreamingDataset(batched=True) yields.

        batch["__key__"]   # the samples' keys, a list
        batch["jpg"]       # one value per sample (None where a sample lacks the field)
        len(batch)         # samples in it; batch.positions: their global positions
        batch.fields       # the field names, in first-seen order; batch.encoding(name)
        for sample in batch.samples(): ...   # one dict per sample, as decode gives them
        batch.block, batch.spans("jpg")      # packed: every value in one buffer, and where

    Undecoded values are read-only memoryviews (bytes(view) copies one). Read in a DataLoader
    worker, the batch's bytes travel to the training process as one bytes block, pickled
    whole, and the views there slice that block.

    Deliberately not a Mapping or a Sequence: the DataLoader (batch_size=None) then passes it
    through as it is, where it would rebuild a Mapping field by field.
    """

    __slots__ = ("positions", "_keys", "_fields", "_columns", "_data", "_spans")

    def __init__(self, positions, keys, fields, columns, data=None, spans=None):
        self.positions = positions
        self._keys = keys
        self._fields = fields    # [(name, encoding)]
        self._columns = columns  # [list of values], or None until unpacked from _data
        self._data = data        # packed: one bytes object (or any buffer) holding every value
        self._spans = spans      # packed: bytes of int64 (begin, end), field-major; -1 absent

    def __len__(self):
        return len(self._keys)

    def __contains__(self, name):
        return name == "__key__" or any(f == name for f, _ in self._fields)

    def __getitem__(self, name):
        if name == "__key__":
            return self._keys
        for c, (field, _) in enumerate(self._fields):
            if field == name:
                return self._column(c)
        raise KeyError(name)

    @property
    def fields(self):
        return [name for name, _ in self._fields]

    @property
    def block(self):
        """A packed batch's one buffer holding every value, else None: bytes, or a read-only
        memoryview where the batch came from a DataLoader worker through shared memory
        (StreamingDataset's shared_batches) or, in process, where a large block was copied
        ahead into reused memory (docs/data.md). Either slices, compares and converts alike
        (len, [a:b], ==, bytes(), torch.frombuffer, numpy.frombuffer)."""
        data = self._data
        if data is None or isinstance(data, bytes):
            return data
        return memoryview(data)

    def spans(self, name):
        """A packed batch's (begin, end) offsets of field `name` in `block`, one pair per
        sample (begin -1 where the sample lacks the field), as a memoryview of int64 of shape
        (len(batch), 2); None for a batch that is not packed."""
        if self._data is None:
            return None
        for c, (field, _) in enumerate(self._fields):
            if field == name:
                n = len(self._keys)
                whole = memoryview(self._spans).cast("B")
                return whole[16 * c * n:16 * (c + 1) * n].cast("q", (n, 2))
        raise KeyError(name)

    def keys(self):
        return ["__key__"] + self.fields

    def encoding(self, name):
        """The field's MDS encoding ("" for WebDataset fields)."""
        for field, encoding in self._fields:
            if field == name:
                return encoding
        raise KeyError(name)

    def samples(self):
        """The batch as one dict per sample (fields a sample lacks are left out)."""
        columns = [self._column(c) for c in range(len(self._fields))]
        for i, key in enumerate(self._keys):
            sample = {"__key__": key}
            for (name, _), column in zip(self._fields, columns):
                if column[i] is not None:
                    sample[name] = column[i]
            yield sample

    def _column(self, c):
        if self._columns is None:
            self._columns = self._unpack()
        return self._columns[c]

    def _unpack(self):
        whole = memoryview(self._data).cast("B").toreadonly()
        spans = memoryview(self._spans).cast("q")
        n = len(self._keys)
        columns = []
        for c in range(len(self._fields)):
            at = 2 * c * n
            columns.append([whole[spans[at + 2 * i]:spans[at + 2 * i + 1]]
                            if spans[at + 2 * i] >= 0 else None for i in range(n)])
        return columns

    def __reduce__(self):
        if self._data is not None:
            # The packed block pickles as itself, one buffer.
            return (SampleBatch, (self.positions, self._keys, self._fields, None, self._data,
                                  self._spans))
        columns = [[bytes(v) if isinstance(v, memoryview) else v for v in column]
                   for column in self._columns]
        return (SampleBatch, (self.positions, self._keys, self._fields, columns))

    def __repr__(self):
        return f"SampleBatch({len(self)} samples, fields {self.fields})"


class _Queue:
    """What a Prefetcher shares with its thread. The thread holds this, not the Prefetcher, so
    a Prefetcher dropped without close() is collected, and its finalizer stops the thread.

    `ready` is a C-level queue of the chunks made and not yet taken, rather than a deque under
    a Condition: a get() or put() is one C call that blocks without the GIL, where a
    Condition's wait and notify are several Python-level lock operations, each a GIL hand-over
    with the thread. Measured (bench/prefetch_handover.py): 6.5-7.8 us per next() against
    9.1-11.1 with a busy producer. A close() from another thread also wakes a next() that
    waits for an item at once.

    Room: at most `depth` chunks wait. The loop counts what it took (`took`, a plain int, and
    the time of its last take) and the thread what it made, so taking a chunk from a queue that
    has them costs the loop no call into the kernel. A thread with no room waits on a timer
    until just after the loop's take that leaves it `group` (depth // 4) chunks of room,
    reckoned from the pace the loop takes at (room_timer), not for a wake from the loop. Why:
    that wake was a system call waking a thread on another CPU, and on a VM whose cores the
    DataLoader workers keep busy it cost the next() that gave room back 15-30 us (every 8th
    at depth 32: most of a quiet next()'s mean; docs/performance.md, "room without a wake").
    The loop still wakes the thread where its timer would leave the loop short, when half of
    `depth` or less is left (a loop that sped up after a pause), and close() wakes it at once.
    So at most `depth` chunks wait, and about depth - group once the thread has caught up.
    """

    END = object()  # the thread's last put: its end, error or close

    def __init__(self, depth):
        self.ready = queue_module.SimpleQueue()
        self.depth = depth
        self.group = max(1, depth // 4)
        self.low = depth // 2  # the loop wakes a thread waiting for room at this many left
        self.took = 0  # chunks the loop took (written by the loop only)
        self.made = 0  # chunks the thread queued (written by the thread only)
        self.took_at = None  # perf_counter() at the loop's last take
        self.seen = (0, None)  # (took, took_at) when the thread last looked: its pace's base
        self.pace = None  # seconds per chunk the loop takes, a moving average
        self.room_wait = self.ROOM_WAIT_MIN  # the thread's last timer while it had no room
        self.wants_room = False  # the thread waits for room (on `wake`, timed)
        self.wake = queue_module.SimpleQueue()  # put into by the loop when low, and by stop()
        self.error = None
        self.closed = False
        self.waiting = False  # the loop waits in ready.get()
        self.taken = queue_module.SimpleQueue()  # the loop's word that it has its chunk
        self.spent = collections.deque()  # chunks the loop is done with, freed by the thread

    def free_spent(self):
        """Drops the chunks the loop is done with, on this thread. Why: the loop's next()
        freed the batch before last (the chunk held it), and a batch of 64 small samples from
        DataLoader workers (64 keys, 64 positions and a shared-memory block, all made on this
        thread's CPU) took 6-7 us to free there, against under 1 us for the rest of a next()
        with a batch waiting (docs/performance.md, "where a quiet next() goes")."""
        spent = self.spent
        while True:
            try:
                spent.popleft()
            except IndexError:  # all freed, also where next() took the last since the last pop
                return

    ROOM_WAIT_MIN = 0.0002  # the shortest timer: each wake costs this thread's CPU some us
    # The longest: what a loop that stopped taking (an evaluation) costs is a wake of this
    # thread this often; a loop that then takes fast wakes it itself (took_one).
    ROOM_WAIT_MAX = 0.5
    AFTER_TAKE = 0.00005    # how long after the loop's take the thread aims to wake

    def wait_for_room(self):
        """Waits until fewer than `depth` chunks wait, or close()."""
        while True:
            self.wants_room = True  # before the check: a loop that takes after it sees this
            if self.made - self.took < self.depth or self.closed:
                break
            try:
                self.wake.get(timeout=self.room_timer())
            except queue_module.Empty:
                pass
        self.wants_room = False

    def room_timer(self):
        """Seconds until just after the loop's take that leaves `group` chunks of room, from
        the pace the loop takes at (within ROOM_WAIT_MIN and _MAX; doubled while the loop is
        behind its pace, as in a pause). Why just after a take: the refill that follows holds
        the GIL, and a loop that takes a chunk goes on to its step, which (a CUDA
        synchronisation, an all-reduce) leaves the GIL to this thread; a timer at any other
        moment can end where the loop wants the GIL back. In bench/data_stall_probe.py's loop
        of sleeps a timer that ignored the phase left the large set's steps 30 us later
        (docs/performance.md, "room without a wake")."""
        took, took_at = self.took, self.took_at
        seen, seen_at = self.seen
        if took > seen and seen_at is not None:
            pace = (took_at - seen_at) / (took - seen)
            # A loop twice as fast as the average is taken at its word: after a pause (an
            # evaluation) the average would take dozens of refills to come down, each with the
            # loop running low and waking this thread.
            if self.pace is None or pace < self.pace / 2:
                self.pace = pace
            else:
                self.pace += (pace - self.pace) / 4
        self.seen = (took, took_at)
        wait = -1.0
        if self.pace is not None and took_at is not None:
            need = self.made - took - self.depth + self.group  # takes until `group` of room
            wait = took_at + need * self.pace + self.AFTER_TAKE - time.perf_counter()
        if wait <= 0:  # no pace yet, or the loop is behind it
            wait = 2 * self.room_wait
        self.room_wait = min(max(wait, self.ROOM_WAIT_MIN), self.ROOM_WAIT_MAX)
        return self.room_wait

    def took_one(self):
        """The loop's count of a chunk taken; wakes a thread waiting for room whose timer
        would leave the loop short."""
        self.took += 1
        self.took_at = time.perf_counter()
        if self.wants_room and self.made - self.took <= self.low:
            self.wants_room = False
            self.wake.put(None)

    def put(self, chunk):
        if self.made - self.took >= self.depth:
            self.wait_for_room()
        if self.closed:
            return False
        self.free_spent()
        # Words left from a hand-over that gave up waiting: else each later one would take the
        # word meant for the one before and never wait. (Only this thread takes them.)
        while not self.taken.empty():
            self.taken.get_nowait()
        waiting = self.waiting
        self.made += 1
        self.ready.put(chunk)
        if waiting:
            self.hand_over()
        return True

    def hand_over(self):
        """Waits, without the GIL, until the loop that waited for a chunk runs with it again.
        Why: a loop woken by ready.put needs the GIL back, and this thread, going on to its next
        item in Python, kept it until it next waited (for the workers' pipe) or the interpreter's
        switch interval (5 ms) made it let go: next() returned a chunk that had been there for
        up to 5 ms. bench/prefetch_handover.py, a producer in bursts behind the loop: the loop
        had a chunk it waited for 14-15 us after it was made, against 955-972 us before."""
        try:
            self.taken.get(timeout=self.HAND_OVER_SECONDS)
        except queue_module.Empty:
            pass

    HAND_OVER_SECONDS = 0.002  # the longest this thread waits for the loop to take the GIL

    def finish(self, error):
        self.error = error
        self.ready.put(self.END)

    def stop(self):
        self.closed = True
        self.spent.clear()
        while True:
            try:
                self.ready.get_nowait()
            except queue_module.Empty:
                break
        self.wake.put(None)  # a thread waiting for room sees `closed`
        self.ready.put(self.END)  # a loop waiting on another thread for a chunk ends


def _produce(queue, it, chunk_size):
    error = None
    chunk = []
    try:
        for item in it:
            chunk.append(item)
            if len(chunk) < chunk_size:
                continue
            if not queue.put(chunk):
                return
            chunk = []
        if chunk:
            queue.put(chunk)
    except BaseException as e:  # noqa: B036 -- handed to the consumer, whatever it is
        error = e
        if chunk:
            queue.put(chunk)  # the items before the error arrive first
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            try:
                close()  # a generator is closed on the thread that ran it
            except Exception as e:  # noqa: BLE001 -- the first error is the one to report
                error = error or e
        queue.finish(error)


WORKER_PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size


def widen_worker_pipe(iterator, nbytes=WORKER_PIPE_BYTES):
    """Makes the pipe a DataLoader's workers send their batches through hold `nbytes` (1 MiB)
    instead of Linux's 64 KiB; `iterator` is iter(loader) of a DataLoader with workers.
    Returns the pipe's size after, or None where there is no such pipe (no workers, another
    iterable) or it cannot grow (a per-user pipe memory limit): the loader then works as
    before. prefetch() does this itself.

    Why: a batch larger than the pipe crosses it in pieces, each a wake-up of the blocked
    worker and of the reading thread and a round trip of Python's GIL on the reading side
    (five reads for a batch of 64 samples of 4 KiB). With room for whole batches a worker
    writes one without waiting and the training process reads it in one go: measured on a
    2-CPU VM, 2 workers, 64 x 4 KiB batches, 1.5-1.6x the samples/s (docs/performance.md,
    "the workers' pipe"). It reaches into the DataLoader's iterator (its result queue, a
    private attribute of torch.utils.data), so it is a no-op wherever that is not there.
    """
    reader = getattr(getattr(iterator, "_worker_result_queue", None), "_reader", None)
    if reader is None:
        return None
    try:
        fd = reader.fileno()
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, int(nbytes))
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except (OSError, ValueError, AttributeError):
        return None


BATCH_MEMORY_BYTES = 32 << 20  # glibc's most on 64-bit (its own adaptation stops there too)


def keep_batch_memory(max_bytes=BATCH_MEMORY_BYTES):
    """Makes this process's allocator (glibc's malloc) serve blocks below `max_bytes` (32 MiB)
    from its heap and keep up to twice that free there, instead of a fresh mapping per block.
    Returns whether it took effect (False with another allocator). Process-wide, for the
    process's life. prefetch() does this itself around a DataLoader with workers.

    Why: a DataLoader's training process receives each batch from its workers' pipe into fresh
    blocks, in a pattern that never teaches glibc to grow its heap for batch-sized blocks
    rather than map each one on its own (each read asks for the whole rest of the batch, then
    shrinks the block to what came). So each batch of a few MiB lands in new pages, and
    touching a new page is slow on VMs: in a new process on a 2-CPU VM, batches of four 1 MiB
    samples through two workers came at 240-830 samples/s without this and 1,150-1,310 with it
    (docs/performance.md, "batches into fresh pages"). StreamingDataset's packed batches from
    workers come through shared memory instead (shared_batches) and do not need this. It
    costs up to 2 x max_bytes of freed memory held for reuse rather than given back at once."""
    return bool(_gantry.keep_large_blocks_in_heap(int(max_bytes)))


_NO_ITEMS = iter(())  # a Prefetcher's _current between chunks (exhausted: shared safely)


class Prefetcher:
    """An iterator that runs another one on a background thread, up to `depth` items ahead.

        loader = gantry.data.prefetch(torch.utils.data.DataLoader(ds, num_workers=2))
        for batch in loader: ...      # next() takes a batch that is already here

    Why: a DataLoader moves each batch out of its workers (unpickling it from their pipe)
    inside the training loop's next(), and a dataset read in process does its reading and
    decoding there too; either way the loop waits for that work. A training step that
    releases the GIL (a CUDA synchronisation, an all-reduce, I/O) leaves the CPU to this
    thread, so the next batches are ready when the step ends. This is what the DataLoader's
    pin_memory thread does on a GPU machine, without pinning and without needing CUDA.

    Around a DataLoader with workers it also widens the pipe the workers' batches come through
    (widen_worker_pipe) and, unless keep_memory=False, has this process's allocator reuse
    batch-sized blocks (keep_batch_memory).

    Items keep their order, and an exception arrives where its item would have: raised by
    next() once the items before it are taken. close() (or the end of a `with` block, or
    dropping the Prefetcher) stops the thread after the item it is reading; a source
    generator is closed on the thread that ran it. wait_seconds is the time next() waited for
    an item (the consumer's stall). `chunk` items travel together (fewer lock round trips for
    small items such as single samples).

    `depth` is counted in items, so what it covers is depth x the loop's step: for steps of a
    millisecond or less (small samples, small batches) take 16 or more, where the default 4
    covers under 3 ms of a busy machine's hiccups (docs/data.md, "A prefetch thread").
    """

    def __init__(self, source, depth=4, chunk=1, keep_memory=True):
        if int(depth) < 1:
            raise InvalidArgumentError("prefetch depth must be at least 1")
        if int(chunk) < 1:
            raise InvalidArgumentError("prefetch chunk must be at least 1")
        self._queue = _Queue(int(depth))
        self._current = _NO_ITEMS  # the rest of a chunk of several items, or _NO_ITEMS
        self._chunk = None  # the last chunk taken: the loop may hold its last item
        self.wait_seconds = 0.0
        # iter() here, on the caller's thread: a DataLoader starts its workers in it.
        it = iter(source)
        widen_worker_pipe(it)
        if keep_memory and getattr(it, "_worker_result_queue", None) is not None:
            keep_batch_memory()  # batches come from workers (a private attribute, as above)
        self._thread = threading.Thread(target=_produce, args=(self._queue, it, int(chunk)),
                                        name="gantry-prefetch", daemon=True)
        self._thread.start()
        weakref.finalize(self, self._queue.stop)
        _live_prefetchers.add(self)

    def __iter__(self):
        return self

    def __next__(self):
        # A chunk of one item (prefetch()'s) is returned without an iterator over it, and the
        # check for the rest of a chunk is an identity test: 0.3-0.6 us less per call on the
        # 2-vCPU VM of docs/performance.md, a sixth of a call that finds its batch waiting.
        rest = self._current
        if rest is not _NO_ITEMS:
            for item in rest:
                return item
            self._current = _NO_ITEMS
        q = self._queue
        if q.closed:
            raise StopIteration
        try:
            chunk = q.ready.get_nowait()
        except queue_module.Empty:
            t = time.perf_counter()
            q.waiting = True
            chunk = q.ready.get()
            q.waiting = False
            q.taken.put(None)  # the thread may go on: this thread has the GIL back
            self.wait_seconds += time.perf_counter() - t
        if chunk is _Queue.END:
            q.ready.put(chunk)  # every later next() ends too
            error, q.error = q.error, None
            if error is not None and not q.closed:
                raise error
            raise StopIteration
        q.took_one()
        # The chunk before this one's items were returned before the loop's last next(), so a
        # loop that keeps only the batch in hand has let go of them: the thread frees them
        # (_Queue.free_spent). A thread that does not come back to free them (it waits for the
        # workers) leaves at most 2 x `group` of them; then the oldest is freed here, as before.
        if self._chunk is not None:
            q.spent.append(self._chunk)
            if len(q.spent) > 2 * q.group:
                # The thread may take the GIL between the len() and the pop, and free them all:
                # the pop then finds none, which is no error.
                try:
                    q.spent.popleft()
                except IndexError:
                    pass
        self._chunk = chunk
        if len(chunk) == 1:
            return chunk[0]
        self._current = rest = iter(chunk)
        return next(rest)

    def close(self, timeout=None):
        """Stops the thread and drops what was read ahead; waits up to `timeout` seconds (None:
        for as long as the item being read takes) for the thread to end."""
        self._queue.stop()
        self._current = _NO_ITEMS
        self._chunk = None
        # At interpreter exit a daemon thread may be frozen mid-item: never wait for it there.
        if self._thread is not threading.current_thread() and not sys.is_finalizing():
            self._thread.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _ForkedAway:
    """What a Prefetcher made before a fork iterates in the child: its thread was not forked
    with it, so its queue would never fill and next() would wait forever; it raises instead."""

    def __iter__(self):
        return self

    def __next__(self):
        raise EngineError("this prefetch() was started before the process forked; its thread "
                          "exists only in the parent: iterate a new one in this process")


_live_prefetchers = weakref.WeakSet()


def _forget_prefetchers_after_fork():
    """In a forked child, every Prefetcher made before the fork raises instead of waiting for a
    thread the child does not have (the check costs next() nothing)."""
    for p in list(_live_prefetchers):
        p._current = _ForkedAway()
    _live_prefetchers.clear()


os.register_at_fork(after_in_child=_forget_prefetchers_after_fork)


def prefetch(iterable, depth=4, keep_memory=True):
    """Iterates `iterable` (a DataLoader, a dataset, any iterable) on a background thread,
    `depth` items ahead: see Prefetcher."""
    return Prefetcher(iterable, depth, keep_memory=keep_memory)


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not an integer") from None


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _parse_bytes(name, value):
    """An int, or a string of digits with an optional K/M/G/T (binary) suffix ("64G", "512MiB")."""
    if value is None or value == "":
        return 0
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{name}={value!r} is negative")
        return value
    text = str(value).strip().lower()
    for tail in ("ib", "b"):
        if text.endswith(tail) and text[:-len(tail)][-1:] in "kmgt":
            text = text[:-len(tail)]
            break
    unit = text[-1:] if text[-1:] in "kmgt" else ""
    digits = text[:-1] if unit else text
    if not digits.isdigit():
        raise InvalidArgumentError(f"{name}={value!r} is not a byte size (e.g. 64G)")
    return int(digits) * _UNITS[unit]


# DataLoader workers of one dataset share one fetch of each remote shard through a private cache
# in shared memory (a tmpfs: publishing a shard there is a copy in RAM, not a disk write), named
# after the process that made it, removed with the dataset, and swept when that process is gone.
_SHM = "/dev/shm"
_SHARED_PREFIX = "gantry-workers-"
_REMOTE = ("s3://", "http://", "https://")
# Below this much free shared memory (a container's default /dev/shm is 64 MiB) a few shards
# would fill the cache, and a worker waiting on another's fetch lock only to read the shard
# uncached would fetch later than on its own: no private cache then.
_WORKER_CACHE_MIN = 1 << 30


def _remove_worker_cache(path, owner):
    # A forked worker inherits this finalizer; only the process that made the folder removes it.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _sweep_shm(prefix):
    """Removes what this user's processes left in /dev/shm under `prefix` (named prefix + pid +
    "-" + a token) when they ended without removing it (killed): it holds RAM until someone
    does."""
    try:
        names = os.listdir(_SHM)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        path = os.path.join(_SHM, name)
        try:
            st = os.lstat(path)
            if not pid.isdigit() or st.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            if stat_module.S_ISDIR(st.st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                _unlink_quietly(path)
        except OSError:
            continue


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _sweep_worker_caches():
    _sweep_shm(_SHARED_PREFIX)


# A DataLoader worker hands its packed batches to the training process through a ring of shared
# memory (include/gantry/data/batch_ring.h): the pipe carries where each block lies, not its
# bytes. One ring per worker process, made at its first packed batch.
_RING_PREFIX = "gantry-batches-"
_RING_BATCHES = 32        # batches of the first one's size a ring holds by default
_RING_MAX = 256 << 20     # the most a default ring takes
_RING_GROW_AT = 4         # a default ring that holds fewer blocks than this of one grows


class _WorkerRing:
    """This process's batch ring, and the rings it grew out of."""

    def __init__(self):
        self.ring = None     # _gantry.BatchRing, or None: the pipe
        self.retired = []    # outgrown rings, kept until no block of theirs is referenced
        self.grow_above = 0  # a block size that a larger ring had no room for
        self.fixed = False   # sized by shared_batches=: never grown, whoever asks

    def drop_finished(self):
        """Drops the outgrown rings none of whose blocks is referenced any more (not by this
        process, not by a descriptor in the pipe, not by the training process): their files
        go, and the training process forgets its mappings of them."""
        kept = []
        for ring in self.retired:
            if ring.used_bytes == 0:
                ring.retire()
            else:
                kept.append(ring)
        self.retired = kept


_worker = None  # this process's _WorkerRing, made at its first packed batch


def _forget_worker_ring_after_fork():
    global _worker
    _worker = None  # the parent's: a forked worker makes its own


os.register_at_fork(after_in_child=_forget_worker_ring_after_fork)


def _batch_block(path, offset, seq, size):
    """A pickled RingBlock's block, in the process that receives it (the training process)."""
    return _gantry.batch_block(path, offset, seq, size)


def _remove_ring(path, owner):
    if os.getpid() == owner:
        _unlink_quietly(path)


def _worker_ring(block_bytes, size):
    """This worker process's batch ring for a block of `block_bytes`: made on the first call
    (sized for _RING_BATCHES blocks of `block_bytes`, within a sixteenth of the free shared
    memory, unless `size` says), or None where shared memory has no room for it: batches then
    travel through the pipe, as bytes. A default-sized ring that holds fewer than
    _RING_GROW_AT blocks of `block_bytes` (a dataset whose later batches are many times its
    first) is replaced by one sized from this block, where there is room for it. A ring sized
    by `size` (StreamingDataset's shared_batches=) never grows, not for another dataset read
    in the same worker with the default either: its size is a limit the user set."""
    global _worker
    if _worker is None:  # (reset in a forked child: no getpid() per batch)
        _worker = _WorkerRing()  # one try per process
        _worker.ring = _new_ring(block_bytes, size, 0)
        _worker.fixed = size is not None
        return _worker.ring
    w = _worker
    if w.retired:
        w.drop_finished()
    ring = w.ring
    if (size is None and not w.fixed and ring is not None and block_bytes > w.grow_above
            and _RING_GROW_AT * (block_bytes + 64) > ring.capacity):
        bigger = _new_ring(block_bytes, None, 2 * ring.capacity)
        if bigger is None:  # not again until a block twice this one
            w.grow_above = 2 * block_bytes
        else:
            w.retired.append(ring)
            w.ring = ring = bigger
    return ring


def _new_ring(block_bytes, size, at_least):
    """A new batch ring of `size` bytes, or by default sized from `block_bytes` (and of at least
    `at_least`), or None where /dev/shm has no room for it."""
    if not os.access(_SHM, os.W_OK):
        return None
    _sweep_shm(_RING_PREFIX)
    if size is None:
        try:
            st = os.statvfs(_SHM)
        except OSError:
            return None
        # A sixteenth of what is free: eight workers take at most two fifths of it between
        # them, leaving room for torch's own tensors in shared memory and the workers' cache.
        size = min(_RING_BATCHES * (block_bytes + 64), _RING_MAX,
                   st.f_bavail * st.f_frsize // 16)
        size = max(size, _gantry.MIN_BATCH_RING)
        if size < 2 * (block_bytes + 64) or size < at_least:
            return None
    pid = os.getpid()
    path = os.path.join(_SHM, f"{_RING_PREFIX}{pid}-{secrets.token_hex(6)}")
    try:
        ring = _gantry.BatchRing(path, size)
    except _gantry.CheckpointError:
        return None  # a full or missing /dev/shm: the pipe, as without a ring
    # A DataLoader worker ends with os._exit: destructors do not run, multiprocessing's
    # finalizers do.
    multiprocessing_util.Finalize(None, _remove_ring, args=(path, pid), exitpriority=0)
    return ring


def _make_worker_cache(url, fallback_urls):
    """(folder, budget in bytes) of a new private worker cache, or None when the dataset is local
    (its shards are mapped, shared already) or too little writable shared memory."""
    if not any(str(u).startswith(_REMOTE) for u in [url] + list(fallback_urls)):
        return None
    if not os.access(_SHM, os.W_OK):
        return None
    _sweep_worker_caches()
    try:
        st = os.statvfs(_SHM)
    except OSError:
        return None
    # A quarter of the free shared memory: beyond it the least recently used unpinned shards go,
    # and a shard that cannot fit is read without the cache (counted as uncached).
    budget = st.f_bavail * st.f_frsize // 4
    if budget < _WORKER_CACHE_MIN:
        return None
    path = os.path.join(_SHM, f"{_SHARED_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
    try:
        os.mkdir(path, 0o700)
    except OSError:
        return None
    return path, budget


# The stats() fields DataLoader workers report to the dataset's process through shared memory;
# after them in each worker's slot, the stall histogram's buckets (_gantry.stall_bounds and +Inf).
_SUMMED = ("bytes_cache", "bytes_peer", "bytes_durable", "shards_cache", "shards_peer",
           "shards_durable", "cache_damaged", "source_damaged", "uncached", "evictions",
           "samples", "stall_seconds", "active_seconds")
_SLOT = len(_SUMMED) + len(_gantry.stall_bounds) + 1  # values per worker
_WORKER_SLOTS = 256  # DataLoader workers whose stats a rank's stats() gathers
_REPORT_EVERY = 64   # samples between a worker's reports


def _shared_slots():
    """Zeroed shared memory for the workers' reports (inherited by forked workers, pickled into
    spawned ones), or None where shared memory is unavailable."""
    try:
        import multiprocessing
        return multiprocessing.RawArray("d", _WORKER_SLOTS * _SLOT)
    except Exception:  # noqa: BLE001 -- no /dev/shm: stats() then counts this process only
        return None


def _slot_values(stats):
    """A data_stats() dict as a worker's slot holds it."""
    return [float(stats[f]) for f in _SUMMED] + [float(b) for b in stats["stall_buckets"]]


def _workers_sums(shared):
    """The workers' slots added up, and the sum of each worker's samples per active second."""
    sums = [0.0] * _SLOT
    rate = 0.0
    values = list(shared)
    samples, active = _SUMMED.index("samples"), _SUMMED.index("active_seconds")
    for w in range(_WORKER_SLOTS):
        slot = values[w * _SLOT:(w + 1) * _SLOT]
        if not any(slot):
            continue
        for i, v in enumerate(slot):
            sums[i] += v
        if slot[active] > 0:
            rate += slot[samples] / slot[active]
    return sums, rate


# Datasets whose DataLoader workers report into shared memory, for metrics_text(); their counts
# folded into this process's registry so far (per dataset: a list the finaliser shares).
_reporting = weakref.WeakSet()
# Reentrant: a dataset's finaliser may run on this thread, from the garbage collector, while
# the thread already folds (each fold's state is its own dataset's).
_fold_lock = threading.RLock()


def _fold(shared, folded, url, job, pid):
    """Adds what the workers counted since the last fold to the registry's process="workers"
    series (a counter's series only grows, so each fold adds the difference). Only in the
    process that made the dataset (pid): a forked child's registry is not the one scraped."""
    if os.getpid() != pid:
        return
    with _fold_lock:
        sums, rate = _workers_sums(shared)
        if sums == folded:
            return
        added = {f: sums[i] - folded[i] for i, f in enumerate(_SUMMED)}
        added["stall_buckets"] = [sums[i] - folded[i] for i in range(len(_SUMMED), _SLOT)]
        _gantry.fold_worker_stats(url, job, added, rate)
        folded[:] = sums


def _in_worker():
    return torch is not None and torch.utils.data.get_worker_info() is not None


def metrics_text():
    """This process's metrics registry in the Prometheus text format (version 0.0.4): the
    gantry_data_* series of every dataset read here, and the counts of DataLoader workers
    (separate processes) folded in as series of their own, labelled process="workers", so a
    family summed over its series counts every sample once. Serve it from the training process
    (serve_metrics does) for Prometheus to scrape."""
    if not _in_worker():
        for ds in list(_reporting):
            ds._fold_workers()
    return _gantry.metrics_text()


# Seconds a scrape's connection may sit without sending its request or taking the answer: a
# client that connects and goes quiet is dropped, not given a thread for the life of the job.
METRICS_CLIENT_TIMEOUT = 30.0


def serve_metrics(port=0, host="127.0.0.1"):
    """Serves metrics_text() at http://host:port/metrics on a daemon thread; returns the server
    (its server_address holds the port chosen for port=0; shutdown() stops it). Bound to the
    loopback interface unless host says otherwise. A connection silent for
    METRICS_CLIENT_TIMEOUT seconds is closed."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = METRICS_CLIENT_TIMEOUT

        def do_GET(self):  # noqa: N802 -- the http.server interface
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # a scrape every few seconds is not news
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="gantry-metrics", daemon=True).start()
    return server


def _shared_order():
    """Shared memory for the order a worker's next iteration reads in: (epoch, start, seed,
    shuffle, window), written by the dataset's process. A persistent DataLoader worker
    (persistent_workers=True) keeps its copy of the dataset from the first epoch, so set_epoch()
    and load_state_dict() in the training process reach it only through here. None where shared
    memory is unavailable (the worker's copy then decides)."""
    try:
        import multiprocessing
        return multiprocessing.RawArray("Q", 5)  # every field a uint64 (_uint64)
    except Exception:  # noqa: BLE001 -- no /dev/shm
        return None


def _uint64(name):
    """A converter to int that refuses what the order cannot take (its fields are uint64): a
    clear error here, not a TypeError from the reader later, nor a value wrapped on its way to
    the workers."""
    def convert(value):
        v = int(value)
        if not 0 <= v < 1 << 64:
            raise InvalidArgumentError(f"{name} {v} is not in [0, 2**64)")
        return v
    return convert


class _OrderParameter:
    """A StreamingDataset attribute that decides the order (seed, shuffle, window): published
    for persistent workers whenever it is set (see _shared_order)."""

    def __init__(self, convert):
        self.convert = convert

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj, self.slot)

    def __set__(self, obj, value):
        setattr(obj, self.slot, self.convert(value))
        obj._publish_order()


def _rank_and_world():
    if (torch is not None and torch.distributed.is_available()
            and torch.distributed.is_initialized()):
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)


class StreamingDataset(_Base):
    """An IterableDataset over an MDS or WebDataset dataset at `url`.

    Every sample is read exactly once per epoch across all ranks and DataLoader workers, in one
    global order fixed by (the dataset, seed, epoch, window). `batch_size` should be the
    DataLoader's: with it, what the job has consumed after each step is a prefix of the global
    order, which is what state_dict() records (exactly-once holds with any value). The end of an
    epoch is uneven, not padded: samples_this_rank() says how many this rank gets.

    rank and world_size default to torch.distributed's (when initialised), else the RANK and
    WORLD_SIZE environment variables, else 0 and 1. `window` is samples per shuffle window (the
    shards covering one window are held in memory); shuffle=False reads the dataset's own order.
    `shard_samples` (WebDataset) skips counting every shard's samples at open.

    cache_dir: a node-local directory where shards are cached, shared by every process on the
    node (default: $GANTRY_DATA_CACHE_DIR; none when unset). cache_bytes: its budget, an int or
    "64G" (default: $GANTRY_DATA_CACHE_BYTES; 0 is no limit); shards in a reader's window are
    pinned and the rest evicted least recently used first. fallback_urls: more places holding the
    same shards (a peer's agent, the durable tier), tried in order when a shard is missing or
    damaged at `url`. Without a cache_dir, the DataLoader workers of a remote (s3://, http://)
    dataset share one fetch of each shard through a private cache in /dev/shm, at most a quarter
    of its free space, removed with the dataset (share_fetches=False: each worker fetches the
    shards it reads from, which is every shard of its windows). read_ahead: most shards fetched
    ahead of the reader (0: none); the depth
    in use follows measured throughput. job: the metrics' job label (default: $GANTRY_JOB_ID,
    else $SLURM_JOB_ID).

    Local shards (a file:// or plain path dataset, and the node-local cache) are mapped, not
    read (mmap=False reads them): nothing is copied, and every worker and process on the node
    shares the page cache. By default (mmap=None) a file:// dataset's shards are read instead,
    into memory reused from shard to shard, where the first touch of a mapped page is slow (a
    shadow-paged VM: measured once per process, docs/data.md "Mapped shards"), within a budget
    of 256 MiB held that way per process, and on every machine for packed batches of a dataset
    whose samples average large_member_bytes or more. A WebDataset shard read that way is read
    without its members of at least large_member_bytes (default 64 KiB; 0: shards are read
    whole): a packed batch reads each such member from the file straight into its block, one
    copy instead of two, and a sample handed out whole reads it then. With decode=False a field
    is a read-only memoryview of its shard's bytes, valid for as long as it is referenced (it
    keeps the mapping or buffer alive, even after the dataset and its iterator are gone);
    bytes(view) copies it.
    In a DataLoader worker fields are bytes instead, as the DataLoader pickles samples
    (zero_copy=True forces memoryviews, for a collate_fn that consumes them in the worker;
    zero_copy=False forces bytes). A local file cut short while mapped does not crash the
    process: the bytes past the cut read as zeros in views already handed out, and the next
    sample from that shard raises DataLossError naming it (docs/data.md).

    batched=True yields SampleBatch objects of `batch_size` samples (the last of a worker's
    share may be short) instead of sample dicts: give the DataLoader batch_size=None. The
    batches are exactly the DataLoader's batches of the unbatched dataset, in the same order;
    reading them costs Python a few objects per sample instead of a dict and a tuple, and with
    decode=False in DataLoader workers the batch's bytes reach the training process as one
    bytes block. `transform`, if given, then receives and returns a whole batch. packed=True
    (batched, decode=False) makes every batch such a block, in process too: one copy of each
    sample into one buffer (SampleBatch.block, SampleBatch.spans), ready for
    torch.frombuffer and one host-to-device copy; packed=False never packs; None (the
    default) packs only in DataLoader workers. copy_threads: threads besides the reader's own
    that share a packed block's copy once each would copy at least 1 MiB (a batch of large
    samples: one core's copy does not use the machine's memory bandwidth); None (the default)
    is one in the training process where it may run on two or more cores, and none in a
    DataLoader worker, where the workers are the parallelism already; 0 turns it off.
    shared_batches: in a DataLoader worker, packed blocks are gathered into a ring of shared
    memory (/dev/shm) and only where each lies crosses the pipe, the training process reading
    them in place (SampleBatch.block is then a read-only memoryview): the ring's size, by
    default (None) 32 times the worker's first batch within 256 MiB and a sixteenth of the
    free space, replaced by a larger one if later batches outgrow it; 0 or False: none, every
    batch pickled through the pipe. A ring without room (the loop holds many batches, a small
    /dev/shm) sends batches through the pipe; none is ever written over while referenced
    (docs/data.md "From workers through shared memory").

    prefetch=N (read in the training process, num_workers=0): a background thread reads,
    decodes and transforms up to N batches (N x batch_size samples unbatched) ahead while the
    training step runs, so a step that releases the GIL finds its next batch ready
    (stats()["prefetch_wait_seconds"] is what the loop still waited). The order, the
    state_dict (which counts what the loop took, not what was read ahead) and errors are as
    without it; DataLoader workers ignore it (wrap the DataLoader in gantry.data.prefetch()).
    """

    seed = _OrderParameter(_uint64("seed"))
    shuffle = _OrderParameter(bool)
    window = _OrderParameter(_uint64("window"))

    def __init__(self, url, *, batch_size=1, shuffle=True, seed=0, window=1 << 18, epoch=0,
                 rank=None, world_size=None, decode=True, transform=None, verify_hashes=False,
                 shard_samples=None, cache_dir=None, cache_bytes=None, fallback_urls=None,
                 read_ahead=4, job=None, zero_copy=None, mmap=None, batched=False,
                 share_fetches=True, prefetch=0, packed=None, copy_threads=None,
                 shared_batches=None, large_member_bytes=None):
        super().__init__()
        if batch_size < 1:
            raise InvalidArgumentError("batch_size must be at least 1")
        env_rank, env_world = _rank_and_world()
        self.url = url
        self.batch_size = _uint64("batch_size")(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.window = int(window)
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = env_world if world_size is None else int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in [0, {self.world_size})")
        self.decode = decode
        self.transform = transform
        self.verify_hashes = verify_hashes
        if cache_dir is None:
            cache_dir = os.environ.get("GANTRY_DATA_CACHE_DIR") or None
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        if cache_bytes is None:
            cache_bytes = os.environ.get("GANTRY_DATA_CACHE_BYTES")
            self.cache_bytes = _parse_bytes("GANTRY_DATA_CACHE_BYTES", cache_bytes)
        else:
            self.cache_bytes = _parse_bytes("cache_bytes", cache_bytes)
        self.fallback_urls = list(fallback_urls or [])
        if int(read_ahead) < 0:
            raise InvalidArgumentError("read_ahead must be at least 0")
        self.read_ahead = int(read_ahead)
        self.job = job
        self.zero_copy = zero_copy
        self.mmap = None if mmap is None else bool(mmap)
        self.large_member_bytes = (None if large_member_bytes is None else
                                   _parse_bytes("large_member_bytes", large_member_bytes))
        self.batched = bool(batched)
        self.packed = None if packed is None else bool(packed)
        if self.packed and (not self.batched or decode):
            raise InvalidArgumentError("packed=True needs batched=True and decode=False: a "
                                       "packed batch holds its samples' undecoded bytes")
        if copy_threads is not None and not 0 <= int(copy_threads) <= _gantry.MAX_COPY_THREADS:
            raise InvalidArgumentError(f"copy_threads must be in [0, {_gantry.MAX_COPY_THREADS}] "
                                       "(None: the default)")
        self.copy_threads = None if copy_threads is None else int(copy_threads)
        if shared_batches is None or shared_batches is True:
            self.shared_batches = None
        elif shared_batches is False:
            self.shared_batches = 0
        else:
            self.shared_batches = _parse_bytes("shared_batches", shared_batches)
            if 0 < self.shared_batches < _gantry.MIN_BATCH_RING:
                raise InvalidArgumentError(f"shared_batches: at least {_gantry.MIN_BATCH_RING} "
                                           "bytes (0 or False: none)")
        if int(prefetch) < 0:
            raise InvalidArgumentError("prefetch must be at least 0")
        self.prefetch = int(prefetch)
        self._prefetch_wait = 0.0  # seconds this process's loop waited on ended prefetches
        self._ahead = None         # the running iteration's Prefetcher
        # (folder, budget) of the private cache the workers share, made here so that every
        # worker (forked or spawned) gets the same folder; removed when this object goes.
        self._worker_cache = None
        if share_fetches and self.cache_dir is None:
            self._worker_cache = _make_worker_cache(url, self.fallback_urls)
            if self._worker_cache is not None:
                weakref.finalize(self, _remove_worker_cache, self._worker_cache[0], os.getpid())
        if shard_samples is not None:
            shard_samples = [_uint64("a shard's sample count")(n) for n in shard_samples]
        source = _gantry.DataSource(url, wds_shard_samples=shard_samples,
                                    verify_hashes=verify_hashes)
        self.format = source.format
        # Known from here on, so workers (and restarts) never count WebDataset shards again.
        self.shard_samples = list(source.shard_samples)
        self.num_samples = sum(self.shard_samples)
        self._epoch = _uint64("epoch")(epoch)
        self._start = 0          # the global position this epoch's iteration starts at
        self._yielded_here = None  # samples __iter__ gave out in this process (no workers)
        self._worker_stats = _shared_slots()
        self._worker_base = None   # in a worker: (pid, its slot's values, its counters) at start
        self._folded = [0.0] * _SLOT  # the workers' counts metrics_text() has folded in
        self._made_in = os.getpid()
        if self._worker_stats is not None:
            _reporting.add(self)
            # What the workers counted after the last metrics_text() still reaches the registry.
            weakref.finalize(self, _fold, self._worker_stats, self._folded, self.url, self.job,
                             os.getpid())
        self._order = _shared_order()
        self._publish_order()

    def _publish_order(self):
        order = getattr(self, "_order", None)  # None while __init__ has not made it
        if order is not None:
            order[:] = [self._epoch, self._start, self._seed, int(self._shuffle), self._window]

    def _follow_order(self):
        """In a worker: the order the training process last set (see _shared_order)."""
        if self._order is not None:
            epoch, start, seed, shuffle, window = self._order[:]
            self._epoch, self._start, self._seed = epoch, start, seed
            self._shuffle, self._window = bool(shuffle), window

    @property
    def epoch(self):
        return self._epoch

    def set_epoch(self, epoch):
        """Starts epoch `epoch` from its beginning (unless it is the epoch a loaded state is in)."""
        if int(epoch) != self._epoch:
            self._epoch = _uint64("epoch")(epoch)
            self._start = 0
            self._publish_order()
        self._yielded_here = None

    def samples_this_rank(self):
        """Samples this rank reads in the current epoch from where it starts (all its workers)."""
        return _gantry.slot_samples(self.world_size, self.rank, 0, 0, self.batch_size,
                                    self._start, self.num_samples)

    def __len__(self):
        """Samples this rank reads this epoch; with batched=True, the batches it yields (what a
        DataLoader with batch_size=None reports as its length, for progress bars)."""
        if self.batched:
            return -(-self.samples_this_rank() // self.batch_size)
        return self.samples_this_rank()

    def __iter__(self):
        workers, worker = 0, 0
        info = torch.utils.data.get_worker_info() if torch is not None else None
        if info is not None:
            workers, worker = info.num_workers, info.id
            self._follow_order()
        else:
            self._yielded_here = 0
        cache_dir, cache_bytes = self.cache_dir, self.cache_bytes
        if cache_dir is None and self._worker_cache is not None and workers > 1:
            cache_dir, cache_bytes = self._worker_cache
        source = _gantry.DataSource(self.url, wds_shard_samples=self._wds_counts(),
                                    verify_hashes=self.verify_hashes, cache_dir=cache_dir,
                                    cache_bytes=cache_bytes,
                                    fallback_urls=self.fallback_urls, job=self.job,
                                    map_files=self.mmap,
                                    large_member_bytes=self.large_member_bytes,
                                    packed_batches=self.batched and self._packs(info))
        if list(source.shard_samples) != self.shard_samples:
            raise DataLossError(f"{self.url}: the dataset changed since it was opened "
                                f"({sum(source.shard_samples)} samples, not {self.num_samples})")
        reader = _gantry.DataReader(
            source, seed=self.seed, shuffle=self.shuffle, window=self.window, epoch=self._epoch,
            world=self.world_size, rank=self.rank, workers=workers, worker=worker,
            batch=self.batch_size, start=self._start, read_ahead=self.read_ahead,
            zero_copy=self._zero_copy(info), copy_threads=self._copy_threads(info))
        report = self._worker_reporter(info) if info is not None else None
        if self.batched:
            items = self._batches(reader, info, report)
        else:
            items = self._samples(reader, info, report)
        ahead = None
        if info is None and self.prefetch > 0:
            # Batches (or batch_size samples at a time) read and decoded on a thread while the
            # training step runs; counted below as the loop takes them, so state_dict() never
            # counts what was read ahead.
            items = ahead = self._ahead = Prefetcher(
                items, depth=self.prefetch, chunk=1 if self.batched else self.batch_size)
        try:
            for count, item in items:
                if info is None:
                    self._yielded_here += count
                yield item
        finally:
            if ahead is not None:
                ahead.close()
                self._prefetch_wait += ahead.wait_seconds
                if self._ahead is ahead:
                    self._ahead = None

    def _samples(self, reader, info, report):
        n = 0
        try:
            for position, key, fields in reader:
                sample = {"__key__": key}
                for name, encoding, data in fields:
                    sample[name] = decode_field(name, encoding, data) if self.decode else data
                if self.transform is not None:
                    sample = self.transform(sample)
                n += 1
                if report is not None and n % _REPORT_EVERY == 0:
                    report()
                yield 1, sample
        finally:
            if report is not None:
                report()

    def _packs(self, info):
        """Whether batches are packed into one block here (info: the DataLoader worker's)."""
        if self.packed is not None:
            return self.packed
        # By default only where the batch crosses processes and is bytes.
        return info is not None and not self.decode and self.zero_copy is None

    def _batches(self, reader, info, report):
        packed = self._packs(info)
        # In a worker, packed blocks go to the training process through shared memory: the
        # ring is made by the first block (sized from it, which goes in it too), and one of the
        # default size grows for blocks it has too little room for (_worker_ring).
        ring = None
        if packed and info is not None and self.shared_batches != 0:
            ring = functools.partial(_worker_ring, size=self.shared_batches)
        # In process, a large block's copy runs on the copy threads while the loop works on the
        # batch before it, into memory reused from block to block (the reader's `ahead`).
        ahead = packed and info is None
        n = 0
        try:
            while True:
                try:
                    positions, keys, fields, columns = reader.next_batch(self.batch_size, packed,
                                                                         ring, ahead)
                except StopIteration:
                    return
                if packed:
                    data, spans = columns
                    batch = SampleBatch(positions, keys, fields, None, data, spans)
                else:
                    if self.decode:
                        columns = [[None if v is None else decode_field(name, encoding, v)
                                    for v in column]
                                   for (name, encoding), column in zip(fields, columns)]
                    batch = SampleBatch(positions, keys, fields, columns)
                if self.transform is not None:
                    batch = self.transform(batch)
                before, n = n, n + len(keys)
                if report is not None and n // _REPORT_EVERY != before // _REPORT_EVERY:
                    report()
                yield len(keys), batch
        finally:
            if report is not None:
                report()

    def __getstate__(self):
        state = self.__dict__.copy()
        # Shared memory travels only into a process being started (a spawned DataLoader worker);
        # any other pickling (a copy, a checkpoint) leaves it behind, and the workers' private
        # cache with it, whose folder goes with this object.
        from multiprocessing import context
        try:
            context.assert_spawning(self)
        except RuntimeError:
            state["_worker_stats"] = None
            state["_worker_cache"] = None
            state["_order"] = None
        state["_ahead"] = None  # a thread of this process
        return state

    def _worker_reporter(self, info):
        """In a DataLoader worker: a function that writes this worker's counts into its slot of
        the shared memory, so the dataset's own process can add them up in stats()."""
        shared = self._worker_stats
        if shared is None or info.id >= _WORKER_SLOTS:
            return None
        at = info.id * _SLOT
        if self._worker_base is None or self._worker_base[0] != os.getpid():
            # First iteration in this process: continue the slot (an earlier epoch's worker wrote
            # it) and count from here (a forked worker inherits its parent's counters).
            start = _gantry.data_stats(self.url, self.job)
            self._worker_base = (os.getpid(), shared[at:at + _SLOT], _slot_values(start))
        _, slot, own = self._worker_base

        def report():
            now = _slot_values(_gantry.data_stats(self.url, self.job))
            shared[at:at + _SLOT] = [slot[i] + now[i] - own[i] for i in range(_SLOT)]
        return report

    def _fold_workers(self):
        if self._worker_stats is not None:
            _fold(self._worker_stats, self._folded, self.url, self.job, self._made_in)

    def stats(self):
        """What the loader did for this dataset and job in this process, a dict.

        bytes_cache, bytes_peer, bytes_durable (and shards_*): stored shard bytes by where they
        came from; cache_hit_ratio: bytes_cache over all of them; stall_seconds: time the
        consumer waited for data; samples and samples_per_second (over active_seconds, the time
        iterations were running); cache_damaged, source_damaged (copies whose checksum, hash or
        size failed and were fetched again elsewhere), uncached, evictions, read_ahead_depth.
        The same numbers are in the process's Prometheus registry (gantry_data_*).

        With DataLoader workers, the workers' counts are added in (they report every 64 samples
        and at the end of their iteration, through shared memory): stall_seconds and
        active_seconds are then summed over the processes and samples_per_second is the sum of
        each process's rate. Called inside a worker, it returns that worker's own counts.

        prefetch_wait_seconds: with prefetch=N, the time this process's loop waited for the
        prefetch thread, which is then the consumer's stall (stall_seconds counts the waits of
        the reader on that thread, hidden from the loop behind what was read ahead).
        """
        s = _gantry.data_stats(self.url, self.job)
        del s["stall_buckets"]  # the histogram is the registry's (metrics_text)
        ahead = self._ahead
        s["prefetch_wait_seconds"] = self._prefetch_wait + (ahead.wait_seconds if ahead else 0.0)
        shared = self._worker_stats
        if shared is None or _in_worker():
            return s
        sums, rate = _workers_sums(shared)
        for i, f in enumerate(_SUMMED):
            s[f] += sums[i] if isinstance(s[f], float) else int(round(sums[i]))
        s["samples_per_second"] += rate
        read = s["bytes_cache"] + s["bytes_peer"] + s["bytes_durable"]
        s["cache_hit_ratio"] = s["bytes_cache"] / read if read else 0.0
        return s

    def _zero_copy(self, info):
        """Whether the reader hands out memoryviews: always when decoding (the decoders read
        them in place, copying only what stays bytes); with decode=False, as zero_copy says, by
        default everywhere but in a DataLoader worker, whose samples are pickled to the training
        process (a memoryview cannot be) and so are bytes."""
        if self.decode:
            return True
        if self.zero_copy is None:
            return info is None
        return bool(self.zero_copy)

    def _copy_threads(self, info):
        """Helper threads of a packed block's copy: as copy_threads says, by default one in the
        training process (-1: the reader starts it where two or more cores are usable) and none
        in a DataLoader worker."""
        if self.copy_threads is not None:
            return self.copy_threads
        return -1 if info is None else 0

    def _wds_counts(self):
        return self.shard_samples if self.format == "webdataset" else None

    def state_dict(self, num_samples=None):
        """The loader's state, a small JSON-able dict to save with the model's.

        num_samples: samples this rank's training loop has taken from the loader since this
        epoch's iteration began (the sum of its batch sizes). Needed with DataLoader workers,
        whose iteration this process does not see; without workers it defaults to what this
        process handed out.
        """
        if num_samples is None:
            if self._yielded_here is None:
                raise InvalidArgumentError(
                    "state_dict: pass num_samples (the samples this rank has consumed this "
                    "epoch); DataLoader workers iterate in other processes")
            num_samples = self._yielded_here
        steps = -(-int(num_samples) // self.batch_size)  # a short last batch is a step
        consumed = min(self._start + steps * self.world_size * self.batch_size, self.num_samples)
        return {"seed": self.seed, "shuffle": self.shuffle, "window": self.window,
                "epoch": self._epoch, "consumed": consumed, "samples": self.num_samples}

    def load_state_dict(self, state):
        """Continues from a saved state: its epoch, from the next sample the job had not consumed.

        The saved seed, shuffle and window replace this dataset's (the order must stay the one
        the epoch started in). InvalidArgumentError for a state of a dataset of another size.
        """
        if int(state["samples"]) != self.num_samples:
            raise InvalidArgumentError(
                f"the state was saved for {state['samples']} samples; {self.url} has "
                f"{self.num_samples}")
        consumed = int(state["consumed"])
        if not 0 <= consumed <= self.num_samples:
            raise InvalidArgumentError(f"consumed {consumed} is not in [0, {self.num_samples}]")
        # Every field checked before any is taken: a bad state changes nothing.
        epoch = _uint64("epoch")(state["epoch"])
        seed, window = _uint64("seed")(state["seed"]), _uint64("window")(state["window"])
        self._epoch, self._start = epoch, consumed
        self.seed, self.shuffle, self.window = seed, bool(state["shuffle"]), window
        self._yielded_here = None
        self._publish_order()
