"""Builds the compiled extension `_gantry` for `pip install .` (pyproject.toml holds the rest).

The extension is one CMake target of the Gantry tree; this runs CMake with the interpreter pip
runs under (so the extension matches the user's Python and numpy) in setuptools' temporary
build folder, builds only `_gantry` and what it links, and hands the result to setuptools.
Environment: GANTRY_CMAKE_ARGS (extra configure arguments, e.g. a compiler launcher),
GANTRY_BUILD_JOBS (parallel jobs; default: every CPU).
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):

    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            sys.exit("gantry: building the extension needs cmake (and Gantry's build "
                     "dependencies: scripts/setup installs them on Debian 12)")
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DGANTRY_TESTS=OFF", "-DGANTRY_BENCH=OFF",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("GANTRY_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("GANTRY_BUILD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_gantry", "-j", jobs],
                       check=True)
        built = glob.glob(os.path.join(build_dir, "python", "_gantry*.so"))
        if len(built) != 1:
            sys.exit(f"gantry: expected one _gantry*.so under {build_dir}/python, found {built}")
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(built[0], out)


setup(ext_modules=[Extension("_gantry", sources=[])], cmdclass={"build_ext": CMakeBuild})
