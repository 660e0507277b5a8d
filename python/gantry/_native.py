"""Finds the compiled extension `_gantry` (python/src/binding.cc), built into
<build>/python, with a message that says how to get it when it is missing."""

import importlib


def load():
    try:
        return importlib.import_module("_gantry")
    except ImportError as e:
        raise ImportError(
            f"gantry: the compiled module _gantry cannot be imported ({e}). Build it with "
            "`cmake --build build/default --target _gantry` and put build/default/python on "
            "PYTHONPATH next to python/ (Debian's /usr/bin/python3 only).") from e
