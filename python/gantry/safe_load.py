"""Loading a torch.save file without letting it run code.

torch.load(weights_only=True) is the tool for this, but PyTorch 1.13's version of it rejects
plain floats (pickle's BINFLOAT), so it cannot read an optimizer state dict. When it refuses a
file, the file is read again with a restricted unpickler, the approach the pickle documentation
gives ("Restricting Globals"): the only globals a file may name are tensor and storage rebuilders,
dtypes, OrderedDict and numpy's array reconstructors, none of which runs code of the file's
choosing.

PyTorch 1.13's torch.load ignores its pickle_module argument unless weights_only is set, so the
restricted unpickler goes to torch.serialization's own readers, which take it.
"""

import pickle
import types

import torch
import torch.serialization as serialization

_STORAGES = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte",
             "Bool", "ComplexFloat", "ComplexDouble")

_ALLOWED = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("torch", "device"),
    ("builtins", "complex"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}
_ALLOWED |= {("torch", f"{s}Storage") for s in _STORAGES}
_ALLOWED |= {("torch", name) for name in dir(torch)
             if isinstance(getattr(torch, name, None), torch.dtype)}


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only the globals in _ALLOWED."""

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name}: a checkpoint file may hold tensors, "
            "arrays and plain values only (it would run code)")


# What torch.serialization's readers need of a pickle module.
_restricted_pickle = types.SimpleNamespace(
    __name__="gantry.safe_load", Unpickler=RestrictedUnpickler,
    load=lambda f, **kw: RestrictedUnpickler(f, **kw).load())


def _restricted_load(path):
    # pylint: disable=protected-access
    with open(path, "rb") as f:
        if serialization._is_zipfile(f):
            with serialization._open_zipfile_reader(f) as zf:
                return serialization._load(zf, "cpu", _restricted_pickle, encoding="utf-8")
        return serialization._legacy_load(f, "cpu", _restricted_pickle, encoding="utf-8")


def load(path):
    """torch.load of `path` onto the CPU, refusing files that would run code
    (pickle.UnpicklingError naming the global they wanted)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as weights_only_error:
        try:
            return _restricted_load(path)
        except pickle.UnpicklingError as e:
            raise pickle.UnpicklingError(f"{path}: {e}") from weights_only_error
