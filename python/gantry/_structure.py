"""The structure of a checkpointed state: how a nesting of containers, plain values and tensors
becomes a list of flat tensors for the engine plus a JSON document, and back.

The engine stores tensors only. Everything else about a state -- its dicts (with their key types
and order), lists, tuples, plain values, and which tensor sits where as a torch tensor or a numpy
array -- is the JSON document described below, which the engine keeps opaque beside each rank's
part. It is plain data: loading a checkpoint never runs code from it (no pickle).

Document: {"format": "gantry.structure/1", "root": NODE}. A NODE is
    null, true, false, an integer, a string     the Python value itself (64-bit integers)
    {"$int": "123456789012345678901234"}        an integer beyond 64 bits, in decimal
    {"$float": "0x1.8p+0"}                      float.hex(), exact (nan, inf, -0.0 included)
    {"$complex": [REAL, IMAG]}                  two float.hex() strings
    {"$bytes": "base64"}
    {"$list": [NODE, ...]}, {"$tuple": [NODE, ...]}
    {"$dict": [[KEY, NODE], ...]}               keys are NODEs too (int keys of optimizer state)
    {"$odict": [[KEY, NODE], ...], "metadata": NODE}   an OrderedDict; state_dict()'s _metadata
    {"$dtype": "float32"}, {"$size": [2, 3]}    torch.dtype, torch.Size
    {"$npscalar": "<f4", "data": "base64"}      a numpy scalar (its dtype string and bytes)
    {"$tensor": NAME, "kind": "torch" | "numpy", "dtype": DTYPE, "shape": [GLOBAL SHAPE],
     "shard": [ROW_OFFSET, ROWS] (a RowShard only), "byteorder": ">" (non-native numpy only),
     "requires_grad": true (only when set)}
NAME is the tensor's name in the checkpoint manifest, derived from its path in the state
("model/fc1.weight", "optim/state/0/exp_avg") so that every rank of a sharded save names the same
tensor alike.
"""

import base64
import collections
import dataclasses
import json
import math
import sys

import numpy as np

try:
    import torch
except ImportError:  # numpy-only states still work
    torch = None

FORMAT = "gantry.structure/1"

# Checkpoint dtype names (the engine's, which are PyTorch's without "torch.").
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
          "uint8", "bool", "complex64", "complex128")
_NUMPY_DTYPES = {name: np.dtype(name) for name in DTYPES if name != "bfloat16"}
_TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES} if torch is not None else {}
_TORCH_NAMES = {v: k for k, v in _TORCH_DTYPES.items()}


class RowShard:
    """Rows [row_offset, row_offset + len(tensor)) of a tensor whose dim 0 has global_rows rows.

    In a saved state it marks the slice a rank holds; in the `into` of a load it asks for exactly
    those rows, assembled from whatever slices the saving ranks held.
    """

    __slots__ = ("tensor", "row_offset", "global_rows")

    def __init__(self, tensor, row_offset, global_rows):
        if not _is_array(tensor):
            raise TypeError(f"RowShard needs a torch tensor or numpy array, not {type(tensor)}")
        if tensor.ndim < 1:
            raise ValueError("RowShard needs a tensor with at least one dimension")
        row_offset, global_rows = int(row_offset), int(global_rows)
        rows = int(tensor.shape[0])
        if row_offset < 0 or row_offset + rows > global_rows:
            raise ValueError(f"RowShard rows [{row_offset}, {row_offset + rows}) are not inside "
                             f"the {global_rows} rows of the global tensor")
        self.tensor = tensor
        self.row_offset = row_offset
        self.global_rows = global_rows

    @property
    def global_shape(self):
        return [self.global_rows] + [int(d) for d in self.tensor.shape[1:]]

    def __repr__(self):
        return (f"RowShard(rows {self.row_offset}..{self.row_offset + self.tensor.shape[0]} of "
                f"{self.global_rows}, {_describe(self.tensor)})")


def _is_torch(value):
    return torch is not None and isinstance(value, torch.Tensor)


def _is_array(value):
    return _is_torch(value) or isinstance(value, np.ndarray)


def _describe(t):
    """'float32 [4, 8]' for a torch tensor or numpy array."""
    if _is_torch(t):
        dtype = _TORCH_NAMES.get(t.dtype, str(t.dtype))
    else:
        dtype = str(t.dtype)
    return f"{dtype} {list(int(d) for d in t.shape)}"


def _key_repr(key):
    return f"[{key!r}]"


def _name_part(key):
    """One segment of a tensor name: the key as text, with '/' and '%' escaped."""
    text = key if isinstance(key, str) else repr(key)
    return text.replace("%", "%25").replace("/", "%2F") or "%"


@dataclasses.dataclass
class Leaf:
    """One tensor (or row slice) of a state, ready for the engine."""

    name: str
    path: str  # where it sits in the state, for error messages: "state['model']['fc.weight']"
    dtype: str
    global_shape: list
    row_offset: int
    rows: int  # -1: the whole tensor
    array: object  # the contiguous CPU tensor or array whose memory is saved (kept alive)
    data_ptr: int
    nbytes: int

    def descriptor(self):
        return (self.name, self.dtype, self.global_shape, self.row_offset, self.rows,
                self.data_ptr)


class _Names:
    """Unique tensor names from paths; a clash (the key 0 and the key '0') gets a '#n' suffix."""

    def __init__(self):
        self._used = set()

    def make(self, parts):
        base = "/".join(parts) or "%root"
        name, n = base, 1
        while name in self._used:
            n += 1
            name = f"{base}#{n}"
        self._used.add(name)
        return name


def _unsupported_dtype(path, dtype):
    return ValueError(f"{path} has dtype {dtype}, which a checkpoint cannot hold "
                      f"(supported: {', '.join(DTYPES)})")


def _torch_leaf(path, t):
    """A contiguous CPU tensor with the same values as `t`, and its dtype name."""
    if t.layout != torch.strided:
        raise ValueError(f"{path} is a {t.layout} tensor; only dense (strided) tensors can be "
                         "saved (call .to_dense() first)")
    name = _TORCH_NAMES.get(t.dtype)
    if name is None:
        raise _unsupported_dtype(path, t.dtype)
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    # Lazy conjugate or negative views share memory with unconjugated bytes.
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t, name


def _numpy_leaf(path, a):
    """A C-contiguous, native-byte-order array with the same values, its dtype name, and the
    byte order to give it back ('>' or None for native)."""
    if a.dtype.hasobject or a.dtype.fields is not None:
        raise ValueError(f"{path} is a numpy array of dtype {a.dtype}, which a checkpoint cannot "
                         f"hold (supported: {', '.join(n for n in DTYPES if n != 'bfloat16')})")
    byteorder = None
    if not a.dtype.isnative:
        byteorder = a.dtype.byteorder
        a = a.astype(a.dtype.newbyteorder("="))
    native = a.dtype.newbyteorder("=")
    name = next((n for n, d in _NUMPY_DTYPES.items() if d == native), None)
    if name is None:
        raise _unsupported_dtype(path, a.dtype)
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    return a, name, byteorder


class Encoder:
    """Turns a state into the structure document and its Leaf list."""

    def __init__(self, root_name="state"):
        self.leaves = []
        self._names = _Names()
        self._root = root_name

    def encode(self, state):
        root = self._node(state, self._root, [], set())
        return {"format": FORMAT, "root": root}

    def _node(self, value, path, parts, active):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            value = int(value)
            # JSON readers (the engine's among them) keep 64-bit integers exactly, not more.
            if -(2**63) <= value < 2**63:
                return value
            return {"$int": str(value)}
        if isinstance(value, float):
            return {"$float": float(value).hex()}
        if isinstance(value, complex):
            return {"$complex": [value.real.hex(), value.imag.hex()]}
        if isinstance(value, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if isinstance(value, RowShard):
            return self._tensor(value.tensor, path, parts, shard=value)
        if _is_array(value):
            return self._tensor(value, path, parts, shard=None)
        if isinstance(value, np.generic):
            return self._npscalar(value, path)
        if torch is not None and isinstance(value, torch.dtype):
            name = str(value).removeprefix("torch.")
            return {"$dtype": name}
        if torch is not None and isinstance(value, torch.Size):
            return {"$size": [int(d) for d in value]}
        if isinstance(value, (dict, list, tuple)):
            if id(value) in active:
                raise ValueError(f"{path} contains itself; a checkpoint holds trees, not cycles")
            active.add(id(value))
            try:
                return self._container(value, path, parts, active)
            finally:
                active.discard(id(value))
        raise TypeError(f"{path} is a {type(value).__module__}.{type(value).__qualname__}: not a "
                        "tensor, numpy array, dict, list, tuple or plain value (None, bool, int, "
                        "float, complex, str, bytes), so it cannot be checkpointed")

    def _container(self, value, path, parts, active):
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                key = self._key(k, path)
                items.append([key, self._node(v, path + _key_repr(k), parts + [_name_part(k)],
                                              active)])
            if isinstance(value, collections.OrderedDict):
                node = {"$odict": items}
                metadata = getattr(value, "_metadata", None)
                if metadata is not None:
                    node["metadata"] = self._plain(metadata, path + "._metadata")
                return node
            return {"$dict": items}
        tag = "$tuple" if isinstance(value, tuple) else "$list"
        return {tag: [self._node(v, f"{path}[{i}]", parts + [str(i)], active)
                      for i, v in enumerate(value)]}

    def _key(self, key, path):
        if _is_array(key) or isinstance(key, RowShard):
            raise TypeError(f"{path} has a tensor as a key; keys must be plain values")
        return self._plain(key, f"{path} key {key!r}")

    def _plain(self, value, path):
        """A value that must hold no tensors (dict keys, OrderedDict metadata)."""
        before = len(self.leaves)
        node = self._node(value, path, ["%key"], set())
        if len(self.leaves) != before:
            raise TypeError(f"{path} holds a tensor where only plain values may be")
        return node

    def _npscalar(self, value, path):
        if value.dtype.kind not in "biufc":
            raise TypeError(f"{path} is a numpy scalar of dtype {value.dtype}; only boolean, "
                            "integer, float and complex numpy scalars can be checkpointed")
        data = np.asarray(value).tobytes()
        return {"$npscalar": value.dtype.str, "data": base64.b64encode(data).decode("ascii")}

    def _tensor(self, value, path, parts, shard):
        byteorder = None
        if _is_torch(value):
            array, dtype = _torch_leaf(path, value)
            kind, data_ptr = "torch", array.data_ptr()
            nbytes = array.numel() * array.element_size()
            requires_grad = bool(value.requires_grad)
        else:
            array, dtype, byteorder = _numpy_leaf(path, value)
            kind, data_ptr, nbytes = "numpy", array.ctypes.data, array.nbytes
            requires_grad = False
        if shard is None:
            global_shape = [int(d) for d in array.shape]
            row_offset, rows = 0, -1
        else:
            global_shape = shard.global_shape
            row_offset, rows = shard.row_offset, int(array.shape[0])
        name = self._names.make(parts)
        node = {"$tensor": name, "kind": kind, "dtype": dtype, "shape": global_shape}
        if shard is not None:
            node["shard"] = [row_offset, rows]
        if byteorder is not None:
            node["byteorder"] = byteorder
        if requires_grad:
            node["requires_grad"] = True
        # Zero-byte tensors and slices live in the structure only: there is nothing to store.
        if nbytes > 0:
            self.leaves.append(Leaf(name, path, dtype, global_shape, row_offset, rows, array,
                                    data_ptr, nbytes))
        return node


def encode(state, root_name="state"):
    """(structure JSON text, [Leaf]) for `state`; TypeError/ValueError name the bad path."""
    encoder = Encoder(root_name)
    doc = encoder.encode(state)
    return json.dumps(doc, separators=(",", ":"), allow_nan=False), encoder.leaves


def parse(structure_json, what="checkpoint"):
    try:
        doc = json.loads(structure_json)
    except ValueError as e:
        raise ValueError(f"{what}: the structure is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{what}: the structure is not a {FORMAT} document (was it saved by "
                         "gantry.checkpoint?)")
    return doc["root"]


def _numel(shape):
    return math.prod(shape) if shape else 1


@dataclasses.dataclass
class Target:
    """Memory the engine restores one tensor (or row slice) into."""

    name: str
    path: str
    dtype: str
    global_shape: list
    row_offset: int
    rows: int
    array: object
    data_ptr: int

    def descriptor(self):
        return (self.name, self.dtype, self.global_shape, self.row_offset, self.rows,
                self.data_ptr)


class Decoder:
    """Builds a state from a structure document, allocating tensors or reusing those of `into`.

    After decode(), `targets` lists the memory the engine must fill and `finish()` completes
    what the engine cannot do itself (copies into non-contiguous or non-CPU tensors, numpy
    byte order).
    """

    def __init__(self, what, tensor_dtype):
        self.what = what  # "checkpoint step 10", for messages
        # name -> (dtype, global_shape) from the manifest, for checks and missing data.
        self._tensor_dtype = tensor_dtype
        self.targets = []
        self._finishers = []

    # -- fresh values ---------------------------------------------------------------------------

    def build(self, node, path):
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, list) or not isinstance(node, dict):
            raise ValueError(f"{self.what}: malformed structure at {path}")
        if "$int" in node:
            return int(node["$int"])
        if "$float" in node:
            return float.fromhex(node["$float"])
        if "$complex" in node:
            re, im = node["$complex"]
            return complex(float.fromhex(re), float.fromhex(im))
        if "$bytes" in node:
            return base64.b64decode(node["$bytes"])
        if "$list" in node:
            return [self.build(v, f"{path}[{i}]") for i, v in enumerate(node["$list"])]
        if "$tuple" in node:
            return tuple(self.build(v, f"{path}[{i}]") for i, v in enumerate(node["$tuple"]))
        if "$dict" in node or "$odict" in node:
            ordered = "$odict" in node
            out = collections.OrderedDict() if ordered else {}
            for k, v in node["$odict" if ordered else "$dict"]:
                key = self.build(k, path)
                out[key] = self.build(v, path + _key_repr(key))
            if ordered and "metadata" in node:
                out._metadata = self.build(node["metadata"], path + "._metadata")
            return out
        if "$dtype" in node:
            return self._torch_dtype(node["$dtype"], path)
        if "$size" in node:
            return torch.Size(node["$size"]) if torch is not None else tuple(node["$size"])
        if "$npscalar" in node:
            data = base64.b64decode(node["data"])
            return np.frombuffer(data, dtype=np.dtype(node["$npscalar"]))[0]
        if "$tensor" in node:
            return self._fresh_tensor(node, path)
        raise ValueError(f"{self.what}: unknown structure node at {path}: {sorted(node)}")

    def _torch_dtype(self, name, path):
        if torch is None:
            raise ValueError(f"{self.what}: {path} is a torch.dtype, but torch is not installed")
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{self.what}: {path} names an unknown torch dtype '{name}'")
        return dtype

    def _fresh_tensor(self, node, path):
        dtype, shape = node["dtype"], [int(d) for d in node["shape"]]
        if node["kind"] == "torch":
            if torch is None:
                raise ValueError(f"{self.what}: {path} is a torch tensor, but torch is not "
                                 "installed")
            t = torch.empty(shape, dtype=_TORCH_DTYPES[dtype])
            self._add_target(node, path, t, t.data_ptr(), 0, -1, t.numel() * t.element_size())
            if node.get("requires_grad"):
                t.requires_grad_(True)
            return t
        if dtype not in _NUMPY_DTYPES:
            raise ValueError(f"{self.what}: {path} is a numpy array of dtype {dtype}")
        a = np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
        self._add_target(node, path, a, a.ctypes.data, 0, -1, a.nbytes)
        if "byteorder" in node:
            out = np.empty(shape, dtype=a.dtype.newbyteorder(node["byteorder"]))
            self._finishers.append(lambda out=out, a=a: np.copyto(out, a))
            return out
        return a

    def _add_target(self, node, path, array, data_ptr, row_offset, rows, nbytes):
        if nbytes == 0:
            return
        name = node["$tensor"]
        if name not in self._tensor_dtype:
            raise ValueError(f"{self.what}: {path} (tensor '{name}') has no data in the "
                             "checkpoint's manifest")
        self.targets.append(Target(name, path, node["dtype"], [int(d) for d in node["shape"]],
                                   row_offset, rows, array, data_ptr))

    # -- into an existing state -----------------------------------------------------------------

    def merge(self, node, into, path):
        """The value for `node`, reusing `into` (mutated in place where it is a dict, a list, a
        tensor or an array); raises ValueError for tensors of `into` the checkpoint lacks."""
        if isinstance(node, dict) and "$tensor" in node:
            if isinstance(into, RowShard) or _is_array(into):
                self._fill(node, into, path)
                return into
            return self._fresh_tensor(node, path)
        if isinstance(node, dict) and ("$dict" in node or "$odict" in node) and isinstance(
                into, dict):
            items = node.get("$dict", node.get("$odict"))
            seen = set()
            for k, v in items:
                key = self.build(k, path)
                seen.add(_hashable(key))
                sub = path + _key_repr(key)
                into[key] = self.merge(v, into[key], sub) if key in into else self.build(v, sub)
            for key in into:
                if _hashable(key) not in seen and _has_tensors(into[key]):
                    raise ValueError(f"{self.what} has no tensor at {path}{_key_repr(key)}")
            return into
        if isinstance(node, dict) and "$list" in node and isinstance(into, list):
            items = node["$list"]
            for i in range(len(items), len(into)):
                if _has_tensors(into[i]):
                    raise ValueError(f"{self.what} has no tensor at {path}[{i}] (it holds "
                                     f"{len(items)} items there)")
            del into[len(items):]
            for i, v in enumerate(items):
                sub = f"{path}[{i}]"
                if i < len(into):
                    into[i] = self.merge(v, into[i], sub)
                else:
                    into.append(self.build(v, sub))
            return into
        if isinstance(node, dict) and "$tuple" in node and isinstance(into, (tuple, list)):
            items = node["$tuple"]
            for i in range(len(items), len(into)):
                if _has_tensors(into[i]):
                    raise ValueError(f"{self.what} has no tensor at {path}[{i}]")
            return tuple(self.merge(v, into[i], f"{path}[{i}]") if i < len(into)
                         else self.build(v, f"{path}[{i}]") for i, v in enumerate(items))
        if _has_tensors(into):
            raise ValueError(f"{self.what} has no tensor at {path}: it holds "
                             f"{_node_kind(node)} there")
        return self.build(node, path)

    def _fill(self, node, into, path):
        dtype, shape = node["dtype"], [int(d) for d in node["shape"]]
        shard = into if isinstance(into, RowShard) else None
        t = shard.tensor if shard is not None else into
        if shard is not None:
            want_shape, row_offset, rows = shard.global_shape, shard.row_offset, int(t.shape[0])
        else:
            want_shape, row_offset, rows = [int(d) for d in t.shape], 0, -1
        if _is_torch(t):
            have_dtype = _TORCH_NAMES.get(t.dtype, str(t.dtype))
        else:
            have_dtype = next((n for n, d in _NUMPY_DTYPES.items()
                               if d == t.dtype.newbyteorder("=")), str(t.dtype))
        if have_dtype != dtype or want_shape != shape:
            what = "a row shard of " if shard is not None else ""
            raise ValueError(
                f"{path}: {self.what} holds {dtype} {shape} (tensor '{node['$tensor']}'), but "
                f"the target is {what}{have_dtype} {want_shape}")
        nbytes = _numel([int(d) for d in t.shape]) * _itemsize(t)
        if nbytes == 0:
            return
        if _is_torch(t):
            direct = (t.device.type == "cpu" and t.is_contiguous() and not t.is_conj()
                      and not t.is_neg())
            buf = t if direct else torch.empty(list(t.shape), dtype=t.dtype)
            if not direct:
                self._finishers.append(lambda t=t, buf=buf: _torch_copy(t, buf))
            self._add_target(node, path, buf, buf.data_ptr(), row_offset, rows, nbytes)
        else:
            if not t.flags.writeable:
                raise ValueError(f"{path}: the numpy array to load into is read-only")
            direct = t.flags.c_contiguous and t.dtype.isnative
            buf = t if direct else np.empty(t.shape, dtype=t.dtype.newbyteorder("="))
            if not direct:
                self._finishers.append(lambda t=t, buf=buf: np.copyto(t, buf))
            self._add_target(node, path, buf, buf.ctypes.data, row_offset, rows, nbytes)

    def finish(self):
        for fn in self._finishers:
            fn()


def _torch_copy(dst, src):
    with torch.no_grad():
        dst.copy_(src)


def _itemsize(t):
    return t.element_size() if _is_torch(t) else t.dtype.itemsize


def _hashable(key):
    try:
        hash(key)
        return key
    except TypeError:
        return repr(key)


def _has_tensors(value):
    if _is_array(value) or isinstance(value, RowShard):
        return True
    if isinstance(value, dict):
        return any(_has_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_tensors(v) for v in value)
    return False


def _node_kind(node):
    if isinstance(node, dict) and node:
        return next(iter(node)).lstrip("$") if len(node) else "a value"
    return type(node).__name__


if sys.byteorder != "little":  # the engine's chunk format and numpy's "native" agree on this
    raise ImportError("gantry checkpoints need a little-endian host")
