"""Asynchronous, incremental, multi-rank checkpoints of PyTorch and numpy state.

    import gantry.checkpoint as ckpt
    ckpt.configure(root="s3://bucket/ckpt", local="/nvme/gantry", job="run1",
                   rank=rank, world_size=world_size)
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step}
    handle = ckpt.save(state, step=step)     # returns once the tensors are snapshotted
    ...                                      # train on; the tensors may change now
    handle.wait()                            # committed: every rank's part and the manifest
    state = ckpt.load()                      # the latest committed checkpoint, or step=N
    ckpt.load(step=N, into=state)            # fill existing tensors in place

`state` is any nesting of dicts (any plain keys, such as an optimizer's int keys), lists and
tuples of torch tensors, numpy arrays and plain values. A rank that holds only rows of a tensor
wraps them in RowShard(tensor, row_offset, global_rows); loads reshard to any rank count. The
module-level functions use a default Checkpointer (configure(), or the GANTRY_CKPT_ROOT,
GANTRY_CKPT_LOCAL, GANTRY_CKPT_JOB, GANTRY_CKPT_PEERS, RANK and WORLD_SIZE environment
variables); engine options passed to them directly select (and cache) another one.

Checkpointers are thread-safe (the engine is); at interpreter exit every checkpointer this module
opened waits for its saves in flight.
"""

import atexit
import json
import logging
import os
import threading
import time
import weakref

from gantry import _native
from gantry._structure import DTYPES, Decoder, RowShard, encode, parse

_gantry = _native.load()

CheckpointError = _gantry.CheckpointError
InvalidArgumentError = _gantry.InvalidArgumentError
NotFoundError = _gantry.NotFoundError
AlreadyExistsError = _gantry.AlreadyExistsError
PermissionDeniedError = _gantry.PermissionDeniedError
UnavailableError = _gantry.UnavailableError
StorageError = _gantry.StorageError
ResourceExhaustedError = _gantry.ResourceExhaustedError
DataLossError = _gantry.DataLossError
EngineError = _gantry.EngineError

__all__ = [
    "AlreadyExistsError", "CheckpointError", "Checkpointer", "DTYPES", "DataLossError",
    "EngineError", "InvalidArgumentError", "NotFoundError", "PermissionDeniedError",
    "ResourceExhaustedError", "RowShard", "SaveHandle", "StorageError", "UnavailableError",
    "configure",
    "default", "latest_step", "list_checkpoints", "load", "save"
]

DURABILITY = ("local", "durable", "committed")

# Engine options Checkpointer accepts beyond root/local/job/rank/world_size/peers.
ENGINE_OPTIONS = ("chunk_size", "pack_below_bytes", "host_buffer_bytes", "io_threads", "codec",
                  "keep_local", "local_fsync", "run_id", "keep_last", "keep_every", "keep_tagged",
                  "peer_timeout_ms", "commit_timeout_ms", "gc_grace_seconds", "endpoint", "region", "access_key",
                  "secret_key", "session_token", "profile")


class SaveHandle:
    """A save in flight. Behaves as a future (concurrent.futures.Future's reading side):
    done(), result(timeout), exception(timeout), add_done_callback(fn); plus wait(),
    wait_for(durability) and its statistics."""

    def __init__(self, native, checkpointer):
        self._native = native
        # The engine must outlive the save it runs.
        self._checkpointer = checkpointer
        self._callbacks = []
        self._callbacks_lock = threading.Lock()
        self._waiter = None  # the thread that runs callbacks once the save is done

    @property
    def step(self):
        return self._native.step

    def done(self):
        """True once the requested durability is reached (or the save failed)."""
        return self._native.done()

    def running(self):
        return not self._native.done()

    def cancelled(self):
        """Always False: a save that has snapshotted its tensors runs to the end."""
        return False

    def cancel(self):
        """Always False (see cancelled)."""
        return False

    def wait(self, timeout=None):
        """Blocks until the requested durability is reached; raises the save's error, or
        TimeoutError after `timeout` seconds (the save goes on)."""
        if timeout is not None:
            deadline = time.monotonic() + timeout
            delay = 0.001
            while not self._native.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"checkpoint step {self.step}: not done after {timeout} s")
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.05)
        self._native.wait()

    def result(self, timeout=None):
        """Waits as wait() does and returns the save's statistics (the stats dict)."""
        self.wait(timeout)
        return self.stats

    def exception(self, timeout=None):
        """Waits (TimeoutError after `timeout` s) and returns the save's error, or None."""
        try:
            self.wait(timeout)
        except TimeoutError:
            if not self._native.done():
                raise
            return self._error()
        except Exception as e:  # pylint: disable=broad-except
            return e
        return None

    def _error(self):
        try:
            self._native.wait()
        except Exception as e:  # pylint: disable=broad-except
            return e
        return None

    def add_done_callback(self, fn):
        """Calls fn(handle) once the save is done (at once, in this thread, if it already is;
        otherwise from a background thread). An exception fn raises is logged and ignored, as
        concurrent.futures does."""
        with self._callbacks_lock:
            if not self._native.done() or self._waiter is not None:
                self._callbacks.append(fn)
                if self._waiter is None:
                    self._waiter = threading.Thread(target=self._run_callbacks, daemon=True,
                                                    name=f"gantry-save-{self.step}-callbacks")
                    self._waiter.start()
                return
        self._call(fn)

    def _run_callbacks(self):
        self._error()  # waits for the end, whatever it is
        while True:
            with self._callbacks_lock:
                if not self._callbacks:
                    # Later add_done_callback calls run at once in their own thread.
                    self._waiter = None
                    return
                fn = self._callbacks.pop(0)
            self._call(fn)

    def _call(self, fn):
        try:
            fn(self)
        except Exception:  # pylint: disable=broad-except
            logging.getLogger("gantry.checkpoint").exception(
                "checkpoint step %s: a done callback raised", self.step)

    def wait_for(self, durability):
        """Blocks until `durability` ("local", "durable", "committed") is reached."""
        self._native.wait_for(durability)

    @property
    def stats(self):
        """dict: bytes_total, bytes_written, written_fraction, chunks_*, blocking_seconds,
        local_seconds, durable_seconds, committed_seconds (0 until reached)."""
        return self._native.stats

    def __repr__(self):
        return f"<gantry SaveHandle step={self.step} done={self.done()}>"


def _is_stateful(x):
    """PyTorch DCP's Stateful protocol: an object (a module, an optimizer, a data loader...)
    whose state is what its state_dict() returns and that load_state_dict() restores."""
    return (not isinstance(x, (dict, list, tuple, str, bytes)) and
            callable(getattr(x, "state_dict", None)) and
            callable(getattr(x, "load_state_dict", None)))


def _state_of(x, active=None):
    """`x` with every Stateful object replaced by its state_dict() (recursively); containers
    are copied only on the way to one, so plain state is passed through as is. A cycle is left
    for encode() to report."""
    if _is_stateful(x):
        return _state_of(x.state_dict(), active)
    if not isinstance(x, (dict, list, tuple)):
        return x
    active = set() if active is None else active
    if id(x) in active:
        return x
    active.add(id(x))
    try:
        if isinstance(x, dict):
            out = {k: _state_of(v, active) for k, v in x.items()}
            if all(out[k] is v for k, v in x.items()):
                return x
            try:
                copy = type(x)()
                copy.update(out)
                return copy
            except TypeError:
                return out
        out = [_state_of(v, active) for v in x]
        if all(a is b for a, b in zip(out, x)):
            return x
        return type(x)(out) if isinstance(x, list) or type(x) is tuple else out
    finally:
        active.discard(id(x))


class _StatefulSwap:
    """For load(into=...): puts each Stateful object's state_dict() in its place inside `into`
    (dicts and lists are changed in place and restored afterwards), so the loader fills those
    state dicts; apply() then hands each back through load_state_dict()."""

    def __init__(self, into):
        self.swapped = []  # (container, key, object)
        self._active = set()  # containers on the current path: a cycle is Decoder's to report
        self._walk(into, "into")

    def _walk(self, container, path):
        if not isinstance(container, (dict, list, tuple)) or id(container) in self._active:
            return
        self._active.add(id(container))
        try:
            self._walk_items(container, path)
        finally:
            self._active.discard(id(container))

    def _walk_items(self, container, path):
        if isinstance(container, dict):
            items = list(container.items())
        elif isinstance(container, list):
            items = list(enumerate(container))
        elif isinstance(container, tuple):
            for i, v in enumerate(container):
                if _is_stateful(v):
                    raise TypeError(f"load(into=...): {path}[{i}] is a {type(v).__name__} "
                                    "inside a tuple; put Stateful objects in a dict or list")
                self._walk(v, f"{path}[{i}]")
            return
        else:
            return
        for k, v in items:
            if _is_stateful(v):
                sd = v.state_dict()
                container[k] = sd
                self.swapped.append((container, k, v))
                self._walk(sd, f"{path}[{k!r}]")
            else:
                self._walk(v, f"{path}[{k!r}]")

    def restore(self):
        for container, k, obj in reversed(self.swapped):
            container[k] = obj

    def apply(self):
        """Loads each object's filled state dict (what now stands in its place) into it,
        innermost first."""
        for container, k, obj in reversed(self.swapped):
            obj.load_state_dict(container[k])


class Checkpointer:
    """One checkpoint engine (one rank of one job under one root) and the state-dict API on it.

    Arguments default to the environment: root GANTRY_CKPT_ROOT, local GANTRY_CKPT_LOCAL, job
    GANTRY_CKPT_JOB ("default"), peers GANTRY_CKPT_PEERS (comma-separated), rank RANK (0),
    world_size WORLD_SIZE (1). Other keyword options (ENGINE_OPTIONS) go to the engine:
    chunk_size, pack_below_bytes, host_buffer_bytes, io_threads, codec, keep_local, local_fsync,
    run_id (default: GANTRY_RUN_ID, TORCHELASTIC_RUN_ID, or the Slurm job id and restart count),
    keep_last, keep_every, keep_tagged, peer_timeout_ms, commit_timeout_ms, gc_grace_seconds,
    and for S3 endpoint, region, access_key, secret_key, session_token, profile (unset: the AWS
    variables and files).
    """

    def __init__(self, root=None, *, local=None, job=None, rank=None, world_size=None,
                 peers=None, **options):
        unknown = sorted(set(options) - set(ENGINE_OPTIONS))
        if unknown:
            raise TypeError(f"Checkpointer: unknown option(s) {', '.join(unknown)} (known: root, "
                            f"local, job, rank, world_size, peers, {', '.join(ENGINE_OPTIONS)})")
        env = _gantry.env_defaults()  # the GANTRY_CKPT_* variables, read as the CLI reads them
        root = root if root is not None else env["root"]
        if not root:
            raise ValueError("no checkpoint root: pass root=... (a path, file:// or s3:// URL) or "
                             "set GANTRY_CKPT_ROOT")
        root = os.fspath(root)
        local = local if local is not None else env["local"]
        job = job if job is not None else env["job"]
        peers = peers if peers is not None else env["peers"]
        rank = rank if rank is not None else _gantry.env_rank()
        world_size = world_size if world_size is not None else _gantry.env_world_size()
        self.root = root
        self.job = job
        self.rank = int(rank)
        self.world_size = int(world_size)
        # What the last load() fetched from where (bytes, chunks, from_local, from_peers,
        # from_durable, corrupt, seconds); None before the first.
        self.last_restore_stats = None
        self._engine = _gantry.Engine(root, local=os.fspath(local), peers=list(peers), job=job,
                                      rank=self.rank, world_size=self.world_size, **options)
        _open_checkpointers.add(self)

    # -- saving ---------------------------------------------------------------------------------

    def save(self, state, step, *, durability="committed", tags=(), metadata=None):
        """Snapshots `state` as checkpoint `step` and returns a SaveHandle; chunking, hashing
        and writing run in the background, so the tensors may change once this returns.

        durability: what handle.wait() waits for -- "local" (this rank's chunks are in the local
        tier), "durable" (this rank's chunks and part are in the durable tier) or "committed"
        (every rank's part, the manifest and the latest pointer are written).
        Objects with state_dict() and load_state_dict() (PyTorch DCP's Stateful protocol:
        modules, optimizers, schedulers, data loaders) are saved as their state_dict().
        tags: strings; tagged checkpoints survive retention. metadata: a JSON-serialisable dict
        recorded in the manifest (rank 0's).
        """
        if durability not in DURABILITY:
            raise ValueError(f"durability must be one of {', '.join(DURABILITY)}, not "
                             f"{durability!r}")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int, not {type(step).__name__}")
        if isinstance(tags, str):
            tags = (tags,)
        metadata_json = "{}"
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise TypeError("metadata must be a dict (it is stored as a JSON object)")
            try:
                metadata_json = json.dumps(metadata, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise TypeError(f"metadata is not JSON-serialisable: {e}") from None
        structure_json, leaves = encode(_state_of(state))
        # The leaves hold the (possibly copied) tensors alive until the snapshot is taken.
        native = self._engine.save([leaf.descriptor() for leaf in leaves], step=step,
                                   durability=durability, tags=[str(t) for t in tags],
                                   metadata_json=metadata_json, structure_json=structure_json)
        del leaves
        return SaveHandle(native, self)

    def wait_all(self):
        """Waits for every save in flight; raises the first error."""
        self._engine.wait_all()

    # -- loading --------------------------------------------------------------------------------

    def latest_step(self):
        """The newest committed step, or None when there is none."""
        try:
            return self._engine.latest_step()
        except NotFoundError:
            return None

    def _resolve_step(self, step):
        if step == "latest" or step is None:
            try:
                return self._engine.latest_step()
            except NotFoundError as e:
                raise NotFoundError(f"no committed checkpoint of job '{self.job}' under "
                                    f"{self.root}: {e}") from None
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an int or 'latest', not {step!r}")
        return step

    def manifest(self, step="latest"):
        """The checkpoint's manifest (_gantry.Manifest: step, tags, tensors, ranks, ...)."""
        step = self._resolve_step(step)
        try:
            return self._engine.read_manifest(step)
        except CheckpointError as e:
            raise type(e)(f"checkpoint step {step} of job '{self.job}' under {self.root}: "
                          f"{e}") from None

    def metadata(self, step="latest"):
        """The metadata dict recorded with the checkpoint."""
        return json.loads(self.manifest(step).metadata_json)

    def load(self, step="latest", into=None, *, progress=None):
        """Loads checkpoint `step` ("latest" or an int).

        Without `into`, returns the saved state with whole (global) tensors, built from the
        structure this rank saved (rank 0's if this rank did not exist at save time).
        With `into`, fills its tensors and arrays in place (RowShard entries get exactly their
        rows), sets its plain values and containers to the saved ones, adds what it lacks, and
        returns it. ValueError for a dtype or shape mismatch or a tensor the checkpoint lacks.
        Objects in `into` (or `into` itself) with state_dict() and load_state_dict() -- modules,
        optimizers, schedulers, data loaders: PyTorch DCP's Stateful protocol -- are loaded
        through them: their state_dict() is filled in place and passed to load_state_dict().
        progress: callable(bytes_done, bytes_total), called from engine threads.
        """
        manifest = self.manifest(step)
        what = f"checkpoint step {manifest.step}"
        structure_json = manifest.structure_json(self.rank)
        if structure_json is None:
            structure_json = manifest.structure_json(0)
        if structure_json is None or structure_json == "null":
            # Saved through the C++ API (or by a tool) without a Python structure: the state is
            # a flat {name: tensor} dict of whole tensors.
            root = {"$dict": [[name, {"$tensor": name, "kind": "torch", "dtype": t["dtype"],
                                      "shape": list(t["global_shape"])}]
                              for name, t in sorted(manifest.tensors.items())]}
        else:
            root = parse(structure_json, what)
        decoder = Decoder(what, manifest.tensors)
        if into is None:
            state = decoder.build(root, "state")
        elif _is_stateful(into):
            # The whole state is one Stateful object: fill its state dict, then hand it back.
            merged = decoder.merge(root, into.state_dict(), "into")
            self._fill(manifest, decoder, merged, progress)
            into.load_state_dict(merged)
            return into
        else:
            swap = _StatefulSwap(into)
            try:
                state = decoder.merge(root, into, "into")
                self._fill(manifest, decoder, state, progress)
                swap.apply()
            finally:
                swap.restore()
            return state
        self._fill(manifest, decoder, state, progress)
        return state

    def _fill(self, manifest, decoder, state, progress):
        if decoder.targets:
            self.last_restore_stats = self._engine.restore(
                manifest, [t.descriptor() for t in decoder.targets], progress=progress)
        decoder.finish()

    # -- housekeeping ---------------------------------------------------------------------------

    def list(self):
        """Every step with a manifest or parts: dicts with step, committed, damaged, problem,
        parts, world_size, bytes, created_unix, tags; ascending by step. A damaged manifest is
        an entry with damaged=True and problem naming the object, not an error."""
        return self._engine.list()

    def steps(self):
        """The committed steps, ascending (damaged ones are not among them: see list())."""
        return [c["step"] for c in self._engine.list() if c["committed"]]

    def remove(self, step):
        self._engine.remove(step)

    def gc(self, **retention):
        """Applies retention (keep_last, keep_every, keep_tagged override the engine's) and
        deletes chunks no checkpoint references; returns the report dict. Damaged checkpoints
        are left in place, one line each in its "warnings" list."""
        return self._engine.gc(**retention)

    def verify(self, step="latest", progress=None):
        """Reads every chunk of the checkpoint from the durable tier and checks it."""
        return self._engine.verify(self._resolve_step(step), progress=progress)

    def close(self):
        """Waits for the saves in flight and releases the engine."""
        _open_checkpointers.discard(self)
        self._engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"<gantry Checkpointer root={self.root!r} job={self.job!r} "
                f"rank={self.rank}/{self.world_size}>")


# -- module-level API on a default checkpointer --------------------------------------------------

_lock = threading.Lock()
_default = None
_cached = {}  # frozen engine kwargs -> Checkpointer
_open_checkpointers = weakref.WeakSet()  # closed at exit


def configure(root=None, **kwargs):
    """Sets the default Checkpointer (closing the previous one after its saves) and returns it."""
    global _default
    new = Checkpointer(root, **kwargs)
    with _lock:
        old, _default = _default, new
    if old is not None:
        old.close()
    return new


def default():
    """The default Checkpointer: configure()'s, or one from the environment."""
    global _default
    with _lock:
        if _default is None:
            _default = Checkpointer()
        return _default


def _checkpointer(checkpointer, kwargs):
    if checkpointer is not None:
        if kwargs:
            raise TypeError("pass either checkpointer= or engine options, not both")
        return checkpointer
    if not kwargs:
        return default()
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
    with _lock:
        c = _cached.get(key)
        if c is None:
            c = Checkpointer(**kwargs)
            _cached[key] = c
        return c


def save(state, step, *, durability="committed", tags=(), metadata=None, checkpointer=None,
         **engine_options):
    """Checkpointer.save on the default checkpointer, or on `checkpointer`, or on one opened
    (once, then reused) from `engine_options` (root=..., rank=..., ...)."""
    c = _checkpointer(checkpointer, engine_options)
    return c.save(state, step, durability=durability, tags=tags, metadata=metadata)


def load(step="latest", into=None, *, checkpointer=None, progress=None, **engine_options):
    """Checkpointer.load on the default checkpointer (see save for the others)."""
    c = _checkpointer(checkpointer, engine_options)
    return c.load(step, into, progress=progress)


def latest_step(*, checkpointer=None, **engine_options):
    """The newest committed step, or None."""
    return _checkpointer(checkpointer, engine_options).latest_step()


def list_checkpoints(*, checkpointer=None, **engine_options):
    return _checkpointer(checkpointer, engine_options).list()


@atexit.register
def _close_all():
    # Asynchronous saves still running at exit finish rather than vanish.
    for c in list(_open_checkpointers):
        try:
            c.close()
        except Exception:  # pylint: disable=broad-except
            pass
