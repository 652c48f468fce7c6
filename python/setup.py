"""Builds chorus_torch's extension with the repository's CMake (see pyproject.toml).

CHORUS_BUILD_DIR   a build directory where chorus_torch is built already: its
                   python/chorus_torch/_C*.so goes into the wheel as it is.
CHORUS_CMAKE_ARGS  more arguments for the CMake configure step otherwise (the default
                   builds without the CUDA executor, which the backend does not use).
The build's parallelism follows CMake's CMAKE_BUILD_PARALLEL_LEVEL.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled module: a platform wheel, not a pure one."""

    def has_ext_modules(self):
        return True


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build_dir = os.environ.get("CHORUS_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp), "chorus")
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DCHORUS_BUILD_TESTS=OFF", "-DCHORUS_BUILD_TOOLS=OFF", "-DCHORUS_BUILD_CUDA=OFF",
                                   f"-DCHORUS_TORCH_PYTHON={sys.executable}"]
                                  + shlex.split(os.environ.get("CHORUS_CMAKE_ARGS", "")))
            subprocess.check_call(["cmake", "--build", build_dir, "--target", "chorus_torch_C"])
        built = glob.glob(os.path.join(build_dir, "python", "chorus_torch", "_C*.so"))
        if not built:
            raise SystemExit(f"chorus_torch: no extension in {build_dir}/python/chorus_torch (was torch 2.x found "
                             f"when it was configured? CHORUS_TORCH_PYTHON={sys.executable})")
        target = os.path.join(self.build_lib, "chorus_torch")
        os.makedirs(target, exist_ok=True)
        for path in built:
            shutil.copy2(path, target)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithCMake})
