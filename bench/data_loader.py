#!/usr/bin/python3
"""gantry.data.StreamingDataset against the raw read rate and the usual PyTorch loaders, one run.

Issue 11 part 5. Every number is a ratio against baselines measured in the same run on the same
bytes, loaders interleaved (the order rotates each repetition), medians of --repeat runs:

  local   for small (~4 KiB) and large (~1 MiB) samples in a local directory, each set's shards
          and files read --local-repeat-small (4) and --local-repeat-large (10) times over as
          one pass (hard links; one pass of the large set alone is 30 ms), samples/s of
            raw       one thread reading the tar shards sequentially, 4 MiB reads (the line rate)
            gantry    StreamingDataset(shards, decode=False) through a DataLoader, W workers
            gantry0   the same with num_workers=0 (the loader alone, no worker IPC; its fields
                      are memoryviews of the mapped shards, collated into lists: delivered, not
                      read, as the consumer only takes their lengths)
            gantry0_touch  gantry0 whose consumer also reads every byte once (a copy of each
                      sample into one reused buffer): the rate when the bytes are used
            gantryb, gantry0b, gantry0b_touch  the same three with StreamingDataset(batched=True)
                      and DataLoader(batch_size=None): column-wise batches read in one call,
                      and from workers one shared-memory block per batch
            gantry0b_copy  gantry0b with zero_copy=False: each sample's bytes copied out of the
                      shard into a bytes object by the reader (in C++), as the files and
                      tarfile baselines hand their consumer bytes
            gantry0b_packed  gantry0b with packed=True: every batch's bytes copied by the
                      reader into one bytes block (SampleBatch.block, spans per sample), what a
                      loop hands torch.frombuffer and one host-to-device copy
            gantrybp  gantryb's DataLoader drained by gantry.data.prefetch() (a thread that
                      takes batches out of the workers' pipe while the training step runs)
            gantry0bp gantry0b with StreamingDataset(prefetch=--prefetch): batches read on a
                      thread in the training process
            gantryb_wide, files_wide  gantryb and files with the workers' pipe widened to 1 MiB
                      (gantry.data.widen_worker_pipe, which prefetch() does for gantrybp): the
                      widening alone, on gantry's loader and on a baseline (--kinds only)
            KIND_fresh  any loader, each pass in a new process (as a training job starts),
                      where the rest run in this one, whose allocator has seen the data set
                      read (glibc then takes batch-sized blocks from its heap; a new process
                      does not: docs/performance.md "batches into fresh pages"; --kinds only)
            gantrybp_nokeep  gantrybp with prefetch(keep_memory=False): the training
                      process's allocator left as it is (--kinds only)
            KIND_read, KIND_map  any gantry kind with StreamingDataset(mmap=False): local shards
                      read into memory reused from shards dropped before, or mmap=True: mapped
                      (--kinds only; e.g. gantry0b_packed_read, gantrybp_map). Without either,
                      the default (mmap=None): mapped where the first touch of a mapped page is
                      cheap, read where it is not
            KIND_whole  any gantry kind with StreamingDataset(large_member_bytes=0): local shards
                      read into memory are read whole, as before large members were read
                      straight into their batch (--kinds only; e.g. gantry0b_packed_whole)
            KIND_pipe  any gantry kind through workers with StreamingDataset(shared_batches=0):
                      packed batches cross the workers' pipe as bytes, as before the workers'
                      batch rings in shared memory (--kinds only; e.g. gantrybp_pipe_fresh)
            tarfile   a plain IterableDataset over the same shards with Python's tarfile
                      (shards split across workers, members grouped by key), W workers
            imagefolder  torchvision's ImageFolder over the individual files (loader: read the
                      bytes, shuffle=True), W workers
            files     a plain map-style Dataset over the individual files (shuffle=True), W workers
            tarfile0, imagefolder0, files0  the same three in process (num_workers=0); a
                      second table compares each baseline in its best configuration with
                      gantry's best loader whose consumer gets every byte read
          goals (for the best of gantry and gantryb): gantry/raw >= 0.9, gantry/tarfile and gantry/imagefolder >= 2, gantry/files >= 5.
          --cache cold evicts every file of the data set from the page cache before each timed
          run (posix_fadvise DONTNEED, per file: no global cache drop), and reads each set once
          per pass (the repeats are hard links: only their first read would be cold); warm reads
          it once before; reread evicts it and then reads it once before (warm, with the page
          cache's pages as the kernel's read-ahead makes them for a dataset read from disk, not
          as writing the files left them: larger ones, which mapped reading touches faster on
          some VMs, docs/performance.md "the first touch of a mapped page").
  stall   a training loop taking batches at a fixed rate of --stall-load (0.9) times each
          loader's own median samples/s above (compute stands in as sleep, which releases the
          GIL as a CUDA synchronisation does; each sleep shortened by the average oversleep so
          far, so that the loop keeps its rate: the table shows the rate it achieved, and how
          late the sleeps ended, against the same sleep in an idle process), for
          gantry, gantryb, gantrybp, gantry0b and gantry0bp, from the large and the small set,
          each set's shards read --stall-repeat (10) times over as one epoch (hard links: one
          epoch of the small set alone lasts half a second, where 1% would be less than one
          scheduling hiccup of a shared machine):
          the share of the loop's time spent waiting for the next batch, after the first shard's
          samples have arrived (goal < 1%). The loop's rate is --stall-load times a full-speed
          pass of the same loader over the same data just before each run (--stall-rate
          paired; this machine's rate drifts by more than 10% between runs) or times its median
          of the local part (--stall-rate median).
  s3      (--parts s3, needs the GANTRY_S3_* variables of `source "$(scripts/rgw start)"`) each
          set's shards uploaded to the RGW; gantry streaming them (s3:// URL, W workers) against
          `aws s3 cp --recursive` of the same shards followed by gantry reading the local copy;
          total time and time to the first batch (goal: streaming no slower than copy-then-read);
          and gantry streaming with share_fetches=False (each worker fetching every shard it
          reads from, the loader before the workers shared a private cache), interleaved.

Every timed run checks that it delivered every sample's bytes exactly once (count and total).
Resume latency at sample 10 million is bench/data_resume.py.

Usage (docs/performance.md "Data loader" records a run):
  PYTHONPATH=python:build/release/python /usr/bin/python3 bench/data_loader.py \
      --gantry build/release/apps/gantry/gantry
  ... --cache cold         page cache evicted before each timed run
  ... --parts s3           the RGW rows (source "$(scripts/rgw start)" first); --parts takes
                           any of local,stall,s3 (default local,stall)
  ... --quick              tiny inputs, one repetition: a smoke run (python/tests)
  ... --base PYTHONPATH    also the gantry of another build (the commit before a change), as
                           gantry_base/gantry0_base and a stall row, each pass in a child
                           process with that PYTHONPATH: before and after in one run
Output: a Markdown table per part, then one JSON object with every run (last line).
"""

import argparse
import copy as copy_module
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings

import torch
import torch.utils.data

from gantry.data import StreamingDataset
try:
    from gantry.data import prefetch
except ImportError:  # a --base build from before prefetch
    prefetch = None
try:
    from gantry.data import widen_worker_pipe
except ImportError:  # a --base build from before it
    widen_worker_pipe = None

try:
    from torchvision.datasets import ImageFolder
except ImportError:  # python3-torchvision (scripts/setup installs it); the row is then skipped
    ImageFolder = None

CLASSES = 10


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class TarShards(torch.utils.data.IterableDataset):
    """The plain baseline: Python's tarfile over WebDataset shards, shards split across workers,
    consecutive members with the same key (name up to the first dot of its basename) grouped
    into one sample dict, as webdataset does."""

    def __init__(self, shards):
        super().__init__()
        self.shards = shards

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        shards = self.shards if info is None else self.shards[info.id::info.num_workers]
        for path in shards:
            with tarfile.open(path) as tar:
                sample, key = None, None
                for m in tar:
                    if not m.isfile():
                        continue
                    base = m.name.rsplit("/", 1)[-1]
                    k = m.name[:len(m.name) - len(base)] + base.split(".", 1)[0]
                    if k != key:
                        if sample is not None:
                            yield sample
                        sample, key = {"__key__": k}, k
                    sample[base.split(".", 1)[1]] = tar.extractfile(m).read()
                if sample is not None:
                    yield sample


class Files(torch.utils.data.Dataset):
    """The plain map-style baseline: one file per sample, read whole."""

    def __init__(self, paths):
        super().__init__()
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return read_bytes(self.paths[i])


def payload(kind, batch):
    """The list of sample payloads (bytes) of one collated batch of loader `kind`."""
    kind = BASELINE_IN_PROCESS.get(kind, kind)
    kind = kind[:-len("_wide")] if kind.endswith("_wide") else kind
    if kind in ("gantry", "gantry0", "gantryb", "gantry0b", "gantrybp", "gantry0bp",
                "gantry0b_copy", "gantry_unshared", "tarfile"):
        return batch["jpg"]
    if kind == "imagefolder":
        return batch[0]  # (payloads, labels)
    return batch


class DataSet:
    """One size class on disk: individual files (class folders) and the same bytes packed as
    WebDataset shards by `gantry data pack`."""

    def __init__(self, root, name, count, size, per_shard, gantry_cli, seed):
        self.name, self.count, self.size, self.per_shard = name, count, size, per_shard
        self.files_dir = os.path.join(root, name, "files")
        self.shards_dir = os.path.join(root, name, "wds")
        rnd = __import__("random").Random(seed)
        for c in range(CLASSES):
            os.makedirs(os.path.join(self.files_dir, f"c{c}"), exist_ok=True)
        block = os.urandom(size + 4096)  # incompressible; each file a different slice of it
        for i in range(count):
            off = rnd.randrange(4096)
            with open(os.path.join(self.files_dir, f"c{i % CLASSES}", f"s{i:07d}.jpg"), "wb") as f:
                f.write(block[off:off + size])
        subprocess.run([gantry_cli, "data", "pack", self.files_dir, self.shards_dir, "--format",
                        "wds", "--samples-per-shard", str(per_shard)], check=True,
                       stdout=subprocess.DEVNULL)
        self.shards = sorted(glob.glob(os.path.join(self.shards_dir, "*.tar")))
        self.files = sorted(glob.glob(os.path.join(self.files_dir, "*", "*.jpg")))
        assert len(self.files) == count
        self.shard_bytes = sum(os.path.getsize(p) for p in self.shards)
        self.synced = False
        self.repeat = 1

    def all_paths(self):
        return self.shards + self.files

    def repeated(self, times, files=False):
        """The same shards `times` over as one dataset (hard links, no more bytes on disk or in
        the page cache), with the individual files `times` over too (in class folders, for
        ImageFolder) or none: a longer epoch of the same samples."""
        copy = copy_module.copy(self)
        copy.name = self.name
        copy.shards_dir = self.shards_dir + f"-x{times}"
        os.makedirs(copy.shards_dir, exist_ok=True)
        copy.shards = []
        for i in range(len(self.shards) * times):
            path = os.path.join(copy.shards_dir, f"shard-{i:06d}.tar")
            if not os.path.exists(path):
                os.link(self.shards[i % len(self.shards)], path)
            copy.shards.append(path)
        copy.files = []
        if files:
            copy.files_dir = self.files_dir + f"-x{times}"
            for f in self.files:
                cls, name = os.path.split(os.path.relpath(f, self.files_dir))
                os.makedirs(os.path.join(copy.files_dir, cls), exist_ok=True)
                for k in range(times):
                    path = os.path.join(copy.files_dir, cls, f"r{k}-{name}")
                    if not os.path.exists(path):
                        os.link(f, path)
                    copy.files.append(path)
            copy.files.sort()
        copy.count = self.count * times
        copy.repeat = self.repeat * times
        copy.shard_bytes = self.shard_bytes * times
        return copy

    def evict(self):
        # Dirty pages are not dropped: the files are synced once after writing (an fsync per
        # file per run costs a device flush each, minutes for the small set).
        if not self.synced:
            os.sync()
            self.synced = True
        for p in self.all_paths():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def warm(self):
        for p in self.all_paths():
            read_bytes(p)


def raw_read(paths):
    """Sequential read of `paths`, 4 MiB at a time into one buffer: bytes read."""
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    total = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(view)
                if not n:
                    break
                total += n
    return total


def lists(samples):
    """Collates sample dicts into a dict of lists: what default_collate does with bytes, and
    leaves memoryviews (gantry in process, decode=False) as they are instead of treating them as
    sequences of ints."""
    return {k: [s[k] for s in samples] for k in samples[0]}


def as_tensors(sample):
    """A transform run in the worker: each field's bytes as a uint8 tensor, which the
    DataLoader hands to the training process through shared memory (moved there in the worker),
    where bytes go through a pipe that the training process drains inside next()."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer of read-only bytes: the tensor is not written
        return {k: v if k == "__key__" else torch.frombuffer(v, dtype=torch.uint8)
                for k, v in sample.items()}


# The baselines again with num_workers=0: each baseline is also compared in its best
# configuration on this machine, as gantry is (in process or through workers).
BASELINE_IN_PROCESS = {"tarfile0": "tarfile", "imagefolder0": "imagefolder", "files0": "files"}
# Gantry's loaders whose consumer gets every byte read (bytes copied out of the shard, in the
# worker or by the consumer), as every baseline's does; gantry0, gantry0b and gantry0bp hand
# out views that the consumer only measures.
GANTRY_READ = ("gantry", "gantryb", "gantrybp", "gantry0_touch", "gantry0b_touch",
               "gantry0b_copy", "gantry0b_packed", "gantryb_wide", "gantry0b_packed_read",
               "gantrybp_read", "gantry0b_packed_map", "gantrybp_map")


def shard_samples(ds):
    """Samples per shard of `ds`: every shard full but its last, repeated for a repeated set."""
    one = [ds.per_shard] * (ds.count // ds.per_shard // ds.repeat)
    if (ds.count // ds.repeat) % ds.per_shard:
        one.append((ds.count // ds.repeat) % ds.per_shard)
    return one * ds.repeat


class Widened:
    """A DataLoader whose iterator gets its workers' pipe widened (widen_worker_pipe)."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        it = iter(self.loader)
        if widen_worker_pipe(it) is None:
            raise SystemExit("the workers' pipe could not be widened")
        return it


def make_loader(kind, ds, url, args, batch, window, tensors=False):
    for suffix, mmap in (("_read", False), ("_map", True)):
        if kind.endswith(suffix):
            return make_loader(kind[:-len(suffix)], ds, url,
                               argparse.Namespace(**dict(vars(args), mmap=mmap)), batch, window,
                               tensors)
    if kind.endswith("_pipe"):
        return make_loader(kind[:-len("_pipe")], ds, url,
                           argparse.Namespace(**dict(vars(args), shared_batches=0)), batch,
                           window, tensors)
    if kind.endswith("_whole"):
        return make_loader(kind[:-len("_whole")], ds, url,
                           argparse.Namespace(**dict(vars(args), large_member_bytes=0)), batch,
                           window, tensors)
    if kind.endswith("_wide"):
        return Widened(make_loader(kind[:-len("_wide")], ds, url, args, batch, window, tensors))
    if kind in BASELINE_IN_PROCESS:
        return make_loader(BASELINE_IN_PROCESS[kind], ds, url,
                           argparse.Namespace(**dict(vars(args), workers=0)), batch, window)
    if kind == "gantrybp":  # the batched DataLoader with workers, drained by a thread
        return prefetch(make_loader("gantryb", ds, url, args, batch, window, tensors),
                        depth=args.prefetch)
    if kind == "gantrybp_nokeep":  # the same, the allocator left as it is
        return prefetch(make_loader("gantryb", ds, url, args, batch, window, tensors),
                        depth=args.prefetch, keep_memory=False)
    in_process = ("gantry0", "gantry0b", "gantry0bp", "gantry0b_copy", "gantry0b_packed")
    w = 0 if kind in in_process else args.workers
    if kind in in_process + ("gantry", "gantryb", "gantry_unshared"):
        batched = kind.endswith("b") or kind in ("gantry0bp", "gantry0b_copy", "gantry0b_packed")
        more = {"batched": True} if batched else {}  # a --base build may predate batched=
        if kind == "gantry0b_copy":  # bytes copied out of the shard by the reader
            more["zero_copy"] = False
        if kind == "gantry0b_packed":  # one block per batch, copied by the reader
            more["packed"] = True
        if kind == "gantry_unshared":  # each worker fetches the remote shards it reads
            more["share_fetches"] = False
        if kind == "gantry0bp":  # in process, read ahead on the dataset's prefetch thread
            more["prefetch"] = args.prefetch
        if getattr(args, "mmap", None) is not None:  # a KIND_read or KIND_map
            more["mmap"] = args.mmap
        if getattr(args, "shared_batches", None) is not None:  # a KIND_pipe
            more["shared_batches"] = args.shared_batches
        if getattr(args, "large_member_bytes", None) is not None:  # a KIND_whole
            more["large_member_bytes"] = args.large_member_bytes
        data = StreamingDataset(url, batch_size=batch, seed=1, window=window, decode=False,
                                transform=as_tensors if tensors else None, **more,
                                shard_samples=shard_samples(ds))
        if batched:
            return torch.utils.data.DataLoader(data, batch_size=None, num_workers=w)
        return torch.utils.data.DataLoader(data, batch_size=batch, num_workers=w,
                                           collate_fn=lists)
    if kind == "tarfile":
        return torch.utils.data.DataLoader(TarShards(ds.shards), batch_size=batch, num_workers=w)
    if kind == "imagefolder":
        data = ImageFolder(ds.files_dir, loader=read_bytes)
        return torch.utils.data.DataLoader(data, batch_size=batch, num_workers=w, shuffle=True)
    if kind == "files":
        return torch.utils.data.DataLoader(Files(ds.files), batch_size=batch, num_workers=w,
                                           shuffle=True)
    raise ValueError(kind)


def timed_read(kind, ds, args, batch, window, url=None):
    """Seconds for one whole pass (from building the dataset to the last batch), and seconds
    to the first batch; checks every sample's bytes arrived."""
    if kind.endswith("_base"):
        return base_pass(kind[:-len("_base")], ds, args, batch, window, url)
    if kind.endswith("_fresh"):  # in a new process: this one's allocator state plays no part
        return base_pass(kind[:-len("_fresh")], ds, args, batch, window, url,
                         pythonpath=os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    if kind == "raw":
        got = raw_read(ds.shards)
        dt = time.perf_counter() - t0
        if got != ds.shard_bytes:
            raise SystemExit(f"raw read {got} bytes of {ds.shard_bytes}")
        return dt, None
    touch = kind.endswith("_touch")
    if touch:
        kind = kind[:-len("_touch")]
        buf = memoryview(bytearray(ds.size))
    loader = make_loader(kind, ds, url or ds.shards_dir, args, batch, window)
    for suffix in ("_read", "_map", "_nokeep", "_pipe", "_whole"):  # the same batches
        kind = kind[:-len(suffix)] if kind.endswith(suffix) else kind
    first = None
    samples = nbytes = 0
    for b in loader:
        if first is None:
            first = time.perf_counter() - t0
        if kind == "gantry0b_packed":  # the consumer gets the block: every byte, one object
            samples += len(b)
            nbytes += len(b.block)
            continue
        p = payload(kind, b)
        samples += len(p)
        nbytes += sum(len(x) for x in p)
        if touch:  # the consumer reads every byte once: a copy into one reused buffer
            for x in p:
                buf[:len(x)] = x
    dt = time.perf_counter() - t0
    if samples != ds.count or nbytes != ds.count * ds.size:
        raise SystemExit(f"{kind} on {ds.name}: {samples} samples, {nbytes} bytes; want "
                         f"{ds.count}, {ds.count * ds.size}")
    return dt, first


def base_pass(kind, ds, args, batch, window, url=None, rate=None, pythonpath=None):
    """One timed pass of `kind` (gantry, gantry0, or stall at `rate`) with the build at
    --base (or `pythonpath`), in a child process (its own gantry modules); timed inside the
    child exactly as here."""
    spec = {"kind": kind, "shards_dir": ds.shards_dir, "shards": ds.shards, "count": ds.count,
            "files": ds.files, "files_dir": ds.files_dir,
            "size": ds.size, "per_shard": ds.per_shard, "shard_bytes": ds.shard_bytes,
            "repeat": ds.repeat,
            "batch": batch, "window": window, "workers": args.workers, "url": url, "rate": rate,
            "prefetch": args.prefetch, "mmap": getattr(args, "mmap", None),
            "shared_batches": getattr(args, "shared_batches", None),
            "large_member_bytes": getattr(args, "large_member_bytes", None)}
    env = dict(os.environ, PYTHONPATH=args.base if pythonpath is None else pythonpath)
    # Through a file: the paths of a set's individual files are more than a command line holds.
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=args.workdir) as f:
        json.dump(spec, f)
        f.flush()
        r = subprocess.run([sys.executable, __file__, "--one-pass", f.name], env=env,
                           capture_output=True, text=True, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return tuple(out) if kind == "stall" else (out[0], out[1])


def one_pass(spec_path):
    """The child side of base_pass: prints the pass's result as JSON."""
    with open(spec_path) as f:
        spec = json.load(f)
    ds = argparse.Namespace(**{k: spec[k] for k in ("shards_dir", "shards", "count", "size",
                                                     "per_shard", "shard_bytes", "repeat",
                                                     "files", "files_dir")})
    ds.name = "base"
    args = argparse.Namespace(workers=spec["workers"], prefetch=spec["prefetch"],
                              mmap=spec.get("mmap"), shared_batches=spec.get("shared_batches"),
                              large_member_bytes=spec.get("large_member_bytes"))
    torch.set_num_threads(1)
    if spec["kind"] == "stall":
        out = stall_run(ds, args, spec["batch"], spec["window"], spec["rate"])
    else:
        out = timed_read(spec["kind"], ds, args, spec["batch"], spec["window"], url=spec["url"])
    print(json.dumps(list(out)))


class TrainingStep:
    """A training step of `seconds`, on average exactly, that leaves the GIL to other threads
    (as a CUDA synchronisation does): a sleep, shortened by what sleeps have overslept so far.
    A plain time.sleep(step) wakes 100-120 us late on this VM (timer slack and the vCPU's wake),
    which for the small set's 0.64 ms step ran the loop at 0.76 instead of the asked 0.9 of
    the loader's rate (measured 2026-12-04); the loop's achieved rate is reported beside its
    target."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.late = 0.0  # moving average of the oversleep
        self.late_total = 0.0
        self.steps = 0
        _timer_slack(1)

    def __call__(self):
        asked = max(0.0, self.seconds - self.late)
        t = time.perf_counter()
        time.sleep(asked)
        overslept = time.perf_counter() - t - asked
        self.late += (overslept - self.late) / 16
        self.late_total += overslept
        self.steps += 1

    def mean_late(self):
        """Seconds each sleep ended late on average: the timer and the vCPU's wake-up, and,
        under load, the wait for a CPU and for the GIL after the step. The loop keeps its rate
        by sleeping that much less, so a real step of this length would lose it: reported
        beside the stall, not in it."""
        return self.late_total / self.steps if self.steps else 0.0


def _timer_slack(ns):
    """Linux's per-thread timer slack (PR_SET_TIMERSLACK), default 50 us: a sleep may end that
    much late so that the kernel can batch wake-ups."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(29, ctypes.c_ulong(ns), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def idle_late(steps=2000, seconds=0.0004):
    """The mean late wake of TrainingStep's sleep with nothing else running in this process."""
    step = TrainingStep(seconds)
    for _ in range(steps):
        step()
    return step.mean_late()


def stall_run(ds, args, batch, window, rate, tensors=False, kind="gantry"):
    """A loop consuming `batch`-sample steps at `rate` samples/s (compute = TrainingStep) from
    loader `kind`. Returns (stall share after the first shard, stalled s, loop s, first-batch
    s, the loop's achieved samples/s after the first shard, the steps' mean late wake in s)."""
    loader = make_loader(kind, ds, ds.shards_dir, args, batch, window, tensors=tensors)
    step = TrainingStep(batch / rate)
    t0 = time.perf_counter()
    it = iter(loader)
    consumed = 0
    waited = 0.0
    first = None
    start = None  # when accounting starts: once one shard's samples have arrived
    at_start = 0
    while True:
        t = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        if first is None:
            first = now - t0
        if start is not None:
            waited += now - t
        consumed += len(b["__key__"])
        if start is None and consumed >= ds.per_shard:
            start, at_start = now, consumed
        step()
    end = time.perf_counter()
    if consumed != ds.count:
        raise SystemExit(f"stall run consumed {consumed} of {ds.count}")
    loop = end - start if start is not None else 0.0
    return ((waited / loop if loop else 0.0), waited, loop, first,
            (consumed - at_start) / loop if loop else 0.0, step.mean_late())


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_runs(xs, digits=2):
    return ", ".join(f"{x:.{digits}f}" for x in xs)


def local_part(sets, args, results):
    kinds = ["raw", "gantry", "gantry0", "tarfile", "imagefolder", "files", "tarfile0",
             "imagefolder0", "files0"]
    if args.base:
        kinds[3:3] = ["gantry_base", "gantry0_base"]
    kinds[3:3] = ["gantry0_touch", "gantryb", "gantry0b", "gantry0b_touch", "gantry0b_copy",
                  "gantry0b_packed", "gantrybp", "gantry0bp"]
    if args.kinds:
        kinds = [k for k in kinds if k in args.kinds.split(",") or k == "gantry"]
        kinds += [k for k in args.kinds.split(",")
                  if k.endswith(("_wide", "_read", "_map", "_fresh", "_nokeep", "_pipe", "_whole",
                                 "_touch"))
                  and k not in kinds]
    if ImageFolder is None:
        print("(torchvision is not installed: no imagefolder row; apt-get install "
              "python3-torchvision)", file=sys.stderr)
        kinds.remove("imagefolder")
        kinds.remove("imagefolder0")
    for one, batch, window in sets:
        # One pass of the large set alone lasts 30 ms: the same bytes several times over make
        # each pass long enough that a scheduling hiccup is not a tenth of it.
        n = args.local_repeat_small if one.name == "small" else args.local_repeat_large
        ds = one.repeated(n, files=True) if n > 1 else one
        times = {k: [] for k in kinds}
        firsts = {k: [] for k in kinds}
        if args.cache in ("warm", "reread"):
            if args.cache == "reread":
                one.evict()
            one.warm()  # the repeated paths are hard links to the same inodes
        for rep in range(args.repeat):
            order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
            for k in order:
                if args.cache == "cold":
                    one.evict()
                dt, first = timed_read(k, ds, args, batch, window)
                times[k].append(dt)
                if first is not None:
                    firsts[k].append(first)
                print(f"  {ds.name} {k} run {rep + 1}: {dt:.3f} s "
                      f"({ds.count / dt:,.0f} samples/s)", file=sys.stderr, flush=True)
        rates = {k: [ds.count / t for t in times[k]] for k in kinds}
        med = {k: median(rates[k]) for k in kinds}
        results["local"][ds.name] = {
            "samples": ds.count, "sample_bytes": ds.size, "shards": len(ds.shards),
            "repeat": ds.repeat,
            "batch": batch, "window": window, "workers": args.workers, "cache": args.cache,
            "samples_per_s": rates, "first_batch_s": firsts,
            "median_samples_per_s": med}
        print(f"\n### {ds.name}: {ds.count:,} samples of {ds.size:,} bytes ({one.count:,} "
              f"{ds.repeat} times over), {len(ds.shards)} shards, batch {batch}, "
              f"{args.workers} workers, window {window}, {args.cache} page cache\n")
        print("| loader | samples/s (median) | MB/s | gantry / this | gantryb / this | goal "
              "| runs (samples/s) |")
        print("|---|---:|---:|---:|---:|---|---|")
        goals = {"raw": ">= 0.9", "tarfile": ">= 2", "imagefolder": ">= 2", "files": ">= 5"}
        for k in kinds:
            ratio = med["gantry0" if k == "gantry0_base" else "gantry"] / med[k]
            ratio_b = f"{med['gantryb'] / med[k]:.2f}" if "gantryb" in med else ""
            print(f"| {k} | {med[k]:,.0f} | {med[k] * ds.size / 1e6:,.0f} | {ratio:.2f} | "
                  f"{ratio_b} | {goals.get(k, '')} | {fmt_runs(rates[k], 0)} |")
        best_table(ds, med, goals, results)
    return results


def best_table(ds, med, goals, results):
    """Each baseline in its best configuration (in process or through workers) against
    gantry's best loader whose consumer reads every byte (GANTRY_READ)."""
    mine = [k for k in GANTRY_READ if k in med]
    if not mine:
        return
    g = max(mine, key=lambda k: med[k])
    print(f"\n{ds.name}, best configuration of each (gantry: the best of "
          f"{', '.join(mine)}):\n")
    print("| baseline | its best | samples/s | gantry's best | samples/s | ratio | goal |")
    print("|---|---|---:|---|---:|---:|---|")
    best = {}
    for family in ("raw", "tarfile", "imagefolder", "files"):
        options = [k for k in (family, family + "0", family + "_wide") if k in med]
        if not options:
            continue
        b = max(options, key=lambda k: med[k])
        best[family] = {"baseline": b, "gantry": g, "ratio": med[g] / med[b]}
        print(f"| {family} | {b} | {med[b]:,.0f} | {g} | {med[g]:,.0f} | "
              f"{med[g] / med[b]:.2f} | {goals[family]} |")
    results["local"][ds.name]["best"] = best


# Stall rows: (row suffix, loader kind), each at --stall-load x its own loader's median rate.
STALL_KINDS = (("", "gantry"), (" (batched)", "gantryb"),
               (" (batched, prefetch thread)", "gantrybp"), (" (batched, in process)", "gantry0b"),
               (" (batched, in process, prefetch)", "gantry0bp"))


def stall_part(sets, args, results):
    print(f"\n### consumer stall at {args.stall_load} x each loader's median rate, each set's "
          f"shards {args.stall_repeat} times over as one epoch\n")
    results["stall_idle_late_s"] = idle = idle_late()
    print(f"(late wake: how late each step's sleep ended, on average; the same sleep in an idle "
          f"process: {1e6 * idle:.0f} us)\n")
    print("| set | loop's target samples/s | achieved | loop s after first shard | stalled s "
          "| stall share | late wake per step, us | first batch s | runs (stall share) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    results["stall_repeat"] = args.stall_repeat
    for one, batch, window in sets:
        lines = results["local"][one.name]["median_samples_per_s"]
        ds = one.repeated(args.stall_repeat) if args.stall_repeat > 1 else one
        rows = [(ds.name + suffix, kind, False) for suffix, kind in STALL_KINDS if kind in lines]
        if args.stall_tensors:
            rows.append((ds.name + " (tensors)", "gantry", True))
        runs = {name: [] for name, _, _ in rows}
        paired = {name: [] for name, _, _ in rows}
        base_runs = []
        base_line = lines.get("gantry_base")
        for rep in range(args.repeat):
            for name, kind, tensors in rows[rep % len(rows):] + rows[:rep % len(rows)]:
                if args.cache == "cold":
                    ds.evict()
                rate = lines[kind]
                if args.stall_rate == "paired":
                    # This machine's rate drifts by more than 10% between runs: the loop's
                    # target is set by a full-speed pass over the same set just before it.
                    dt, _ = timed_read(kind, ds, args, batch, window)
                    rate = ds.count / dt
                    paired[name].append(rate)
                    if args.cache == "cold":
                        ds.evict()
                runs[name].append(stall_run(ds, args, batch, window, args.stall_load * rate,
                                            tensors=tensors, kind=kind))
            if base_line:
                if args.cache == "cold":
                    ds.evict()
                base_runs.append(base_pass("stall", ds, args, batch, window,
                                           rate=args.stall_load * base_line))
        table = [(name, runs[name], args.stall_load * (median(paired[name]) if paired[name]
                                                        else lines[kind]))
                 for name, kind, _ in rows]
        if base_runs:
            table.append((ds.name + " (base)", base_runs, args.stall_load * base_line))
        for name, rs, r in table:
            share = median([x[0] for x in rs])
            mid = sorted(rs, key=lambda x: x[0])[len(rs) // 2]
            results["stall"][name] = {"rate": r, "runs": rs}
            print(f"| {name} | {r:,.0f} | {mid[4]:,.0f} | {mid[2]:.2f} | {mid[1]:.3f} "
                  f"| {100 * share:.2f}% | {1e6 * mid[5]:.0f} | {mid[3]:.3f} "
                  f"| {fmt_runs([100 * x[0] for x in rs])} % |")
    return results


def s3_part(ds, args, batch, window, results):
    endpoint = os.environ.get("GANTRY_S3_ENDPOINT")
    bucket = os.environ.get("GANTRY_S3_BUCKET")
    if not endpoint or not bucket:
        raise SystemExit("--parts s3 needs GANTRY_S3_ENDPOINT and GANTRY_S3_BUCKET: "
                         'source "$(scripts/rgw start)" first')
    os.environ.setdefault("AWS_ENDPOINT_URL", endpoint)
    aws = [args.aws, "--endpoint-url", endpoint]
    prefix = f"bench-data-loader/{ds.name}"
    url = f"s3://{bucket}/{prefix}"
    subprocess.run(aws + ["s3", "cp", "--recursive", "--quiet", ds.shards_dir, url + "/"],
                   check=True)
    copy_dir = os.path.join(args.workdir, "s3-copy")
    stream_t, stream_first, copy_t, copy_first, copy_only = [], [], [], [], []
    unshared_t = []
    sides = ["stream", "copy", "unshared"]
    for rep in range(args.repeat):
        for side in sides[rep % 3:] + sides[:rep % 3]:
            if side == "stream":
                dt, first = timed_read("gantry", ds, args, batch, window, url=url)
                stream_t.append(dt)
                stream_first.append(first)
            elif side == "unshared":
                dt, _ = timed_read("gantry_unshared", ds, args, batch, window, url=url)
                unshared_t.append(dt)
            else:
                shutil.rmtree(copy_dir, ignore_errors=True)
                t0 = time.perf_counter()
                subprocess.run(aws + ["s3", "cp", "--recursive", "--quiet", url + "/",
                                      copy_dir + "/"], check=True)
                c = time.perf_counter() - t0
                dt, first = timed_read("gantry", ds, args, batch, window, url=copy_dir)
                copy_only.append(c)
                copy_t.append(c + dt)
                copy_first.append(c + first)
            print(f"  s3 {side} run {rep + 1} done", file=sys.stderr, flush=True)
    shutil.rmtree(copy_dir, ignore_errors=True)
    results["s3"][ds.name] = {"stream_s": stream_t, "stream_first_s": stream_first,
                     "copy_then_read_s": copy_t, "copy_then_read_first_s": copy_first,
                     "copy_s": copy_only, "stream_unshared_s": unshared_t}
    ms, mc = median(stream_t), median(copy_t)
    print(f"\n### from Ceph RGW: {ds.name} set ({ds.count:,} x {ds.size:,} bytes, "
          f"{len(ds.shards)} shards), {args.workers} workers\n")
    print("| side | total s (median) | first batch s (median) | runs (total s) |")
    print("|---|---:|---:|---|")
    print(f"| gantry streaming s3:// | {ms:.2f} | {median(stream_first):.2f} | "
          f"{fmt_runs(stream_t)} |")
    print(f"| gantry streaming, workers not sharing fetches | {median(unshared_t):.2f} | | "
          f"{fmt_runs(unshared_t)} |")
    print(f"| aws s3 cp, then gantry local | {mc:.2f} (copy {median(copy_only):.2f}) | "
          f"{median(copy_first):.2f} | {fmt_runs(copy_t)} |")
    print(f"\ncopy-then-read / streaming: total {mc / ms:.2f}x, first batch "
          f"{median(copy_first) / median(stream_first):.1f}x (goal: total >= 1); "
          f"workers sharing fetches against not: {median(unshared_t) / ms:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gantry", default="build/release/apps/gantry/gantry", help="the gantry CLI")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers, every loader")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", choices=("warm", "cold", "reread"), default="warm",
                    help="warm: the page cache as writing the files left it; reread: evicted, "
                         "then read back once (the pages the kernel's read-ahead makes, as for a "
                         "dataset read from disk); cold: evicted before each timed run")
    ap.add_argument("--small-count", type=int, default=40000)
    ap.add_argument("--small-size", type=int, default=4096)
    ap.add_argument("--small-per-shard", type=int, default=2000)
    ap.add_argument("--small-batch", type=int, default=64)
    ap.add_argument("--large-count", type=int, default=320)
    ap.add_argument("--large-size", type=int, default=1 << 20)
    ap.add_argument("--large-per-shard", type=int, default=16)
    ap.add_argument("--large-batch", type=int, default=4)
    ap.add_argument("--local-repeat-small", type=int, default=4,
                    help="the local part reads the small set's shards and files this many times "
                         "over as one pass (hard links)")
    ap.add_argument("--local-repeat-large", type=int, default=10,
                    help="the same for the large set (one pass of it alone is 30 ms)")
    ap.add_argument("--window-shards", type=int, default=4,
                    help="shuffle window, in shards (gantry holds a window's shards per reader)")
    ap.add_argument("--mmap", choices=("auto", "on", "off"), default="auto",
                    help="StreamingDataset(mmap=) for every gantry loader without a _read or "
                         "_map suffix: auto (None, the default), on (True), off (False)")
    ap.add_argument("--stall-load", type=float, default=0.9)
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval(S) for the whole run, every loader alike "
                         "(Python's default is 0.005 s)")
    ap.add_argument("--stall-rate", choices=("paired", "median"), default="paired",
                    help="the loop's rate: --stall-load times a full-speed pass of the same "
                         "loader over the same set just before each run (paired), or times the "
                         "loader's median of the local part")
    ap.add_argument("--stall-repeat", type=int, default=10,
                    help="the stall runs read each set's shards this many times over, as one "
                         "epoch (hard links): long enough that 1%% of the loop is more than a "
                         "scheduling hiccup")
    ap.add_argument("--prefetch", type=int, default=4,
                    help="batches the prefetch thread reads ahead (gantrybp, gantry0bp)")
    ap.add_argument("--stall-tensors", action="store_true",
                    help="also a stall row whose workers hand over uint8 tensors (as_tensors)")
    ap.add_argument("--parts", default="local,stall",
                    help="comma-separated: local, stall (needs local), s3 (needs the RGW)")
    ap.add_argument("--aws", default="/usr/bin/aws")
    ap.add_argument("--quick", action="store_true", help="tiny inputs, one repetition")
    ap.add_argument("--dir", default=None, help="where to write the data (default: temp)")
    ap.add_argument("--base", default=None,
                    help="PYTHONPATH of another gantry build (e.g. the commit before a change): "
                         "adds its gantry and gantry0 as gantry_base, gantry0_base (and a stall "
                         "row), each pass in a child process, interleaved with the rest")
    ap.add_argument("--kinds", default=None,
                    help="comma-separated loaders of the local part to run (gantry always)")
    ap.add_argument("--one-pass", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.mmap = {"auto": None, "on": True, "off": False}[args.mmap]
    if args.one_pass:
        one_pass(args.one_pass)
        return
    if args.quick:
        args.small_count, args.small_per_shard = 300, 100
        args.large_count, args.large_size, args.large_per_shard = 12, 64 << 10, 4
        args.repeat = 1
        args.stall_repeat = min(args.stall_repeat, 2)
        args.local_repeat_small = args.local_repeat_large = 1
    if args.cache == "cold" and max(args.local_repeat_small, args.local_repeat_large,
                                    args.stall_repeat) > 1:
        # The repeats are hard links to the same files: only the first would be read cold.
        print("--cache cold: each set is read once per pass (--local-repeat-small, "
              "--local-repeat-large and --stall-repeat 1)", file=sys.stderr)
        args.local_repeat_small = args.local_repeat_large = args.stall_repeat = 1
    if not os.access(args.gantry, os.X_OK):
        raise SystemExit(f"{args.gantry}: not an executable gantry CLI (--gantry)")
    torch.set_num_threads(1)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)

    with tempfile.TemporaryDirectory(prefix="gantry-loader-bench-", dir=args.dir) as tmp:
        args.workdir = tmp
        t = time.perf_counter()
        parts = set(args.parts.split(","))
        if not parts <= {"local", "stall", "s3"} or ("stall" in parts and "local" not in parts):
            raise SystemExit(f"--parts {args.parts}: local, stall, s3; stall needs local")
        sets = []
        if parts & {"local", "s3"}:
            small = DataSet(tmp, "small", args.small_count, args.small_size,
                            args.small_per_shard, args.gantry, 1)
            sets.append((small, args.small_batch, args.window_shards * args.small_per_shard))
        large = DataSet(tmp, "large", args.large_count, args.large_size, args.large_per_shard,
                        args.gantry, 2)
        sets.append((large, args.large_batch, args.window_shards * args.large_per_shard))
        print(f"data written and packed in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        results = {"workers": args.workers, "repeat": args.repeat, "cache": args.cache,
                   "local": {}, "stall": {}}
        if "local" in parts:
            local_part(sets, args, results)
        if "stall" in parts:
            stall_part(sets, args, results)
        if "s3" in parts:
            results["s3"] = {}
            for ds, batch, window in sets:
                s3_part(ds, args, batch, window, results)
        print(json.dumps(results))


if __name__ == "__main__":
    main()
