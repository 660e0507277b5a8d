"""Gantry's Python API. `gantry.checkpoint` saves and loads PyTorch and numpy state with the
asynchronous, multi-rank checkpoint engine:

    import gantry.checkpoint
    handle = gantry.checkpoint.save(state, step=100, root="/shared/ckpt")
    state = gantry.checkpoint.load(step="latest", root="/shared/ckpt")

`gantry.data.StreamingDataset` reads MDS and WebDataset datasets into PyTorch in one global
order that resumes mid-epoch on any world size (docs/data.md).

`python3 -m gantry export|import` converts checkpoints to and from plain torch.save files.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # `import gantry` stays cheap (and works without the compiled module) until checkpoint
    # functionality is used.
    if name in ("checkpoint", "data"):
        import importlib
        return importlib.import_module("gantry." + name)
    if name == "RowShard":
        from gantry import checkpoint
        return checkpoint.RowShard
    if name.endswith("Error"):
        # The error classes live in the compiled module, named gantry.<Name>: this is where
        # pickle looks them up (an error from a DataLoader worker), without importing torch.
        from gantry import _native
        cls = getattr(_native.load(), name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls
    raise AttributeError(f"module 'gantry' has no attribute {name!r}")
