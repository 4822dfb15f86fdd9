"""`pip install --no-build-isolation .`: gradwire's Python module, built by the project's own
CMake against the torch importable in the interpreter that runs pip, the way PyTorch's C++
extensions are built.

What it does: imports torch (so it must be installed in this interpreter, and pip must not
isolate the build: --no-build-isolation), hands CMake torch's CMake prefix
(torch.utils.cmake_prefix_path, where a torch wheel keeps TorchConfig.cmake; Debian's
python3-torch keeps none there, and CMake then finds libtorch-dev's), the release that
libtorch must be (python/CMakeLists.txt refuses another, naming both), torch's C++ ABI and
this interpreter, then builds the one target gradwire_python and puts gradwire._C beside the
package's Python files. Nothing is fetched: the build needs what scripts/install_deps.sh
installs (a C++20 compiler, CMake, Ninja, pybind11-dev, python3-dev, Gloo, ZeroMQ, FFTW,
CLI11, nlohmann-json). The CMake build lives in build-pip-SOABI/ and shares ccache's objects
with build/ (CCACHE_BASEDIR), so a tree that scripts/build.sh built recompiles little.
Environment: GRADWIRE_JOBS (parallel jobs; default: every core)."""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def torch_cmake_args():
    """CMake arguments that pin the build to this interpreter's torch."""
    try:
        import torch
        import torch.utils
    except ImportError as e:
        raise SystemExit(
            f"gradwire: building the Python module needs torch importable in {sys.executable} "
            f"({e}); install torch in it first, and run pip with --no-build-isolation so "
            "that the build sees it") from None
    args = [f"-DGRADWIRE_EXPECT_TORCH_VERSION={torch.__version__}"]
    prefix = torch.utils.cmake_prefix_path
    if os.path.isfile(os.path.join(prefix, "Torch", "TorchConfig.cmake")):
        args.append(f"-DCMAKE_PREFIX_PATH={prefix}")
    if not torch._C._GLIBCXX_USE_CXX11_ABI:  # the compiler's default is the new ABI
        args.append("-DCMAKE_CXX_FLAGS=-D_GLIBCXX_USE_CXX11_ABI=0")
    return args


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # Beside build/, at its depth: ccache keys on paths relative to the tree
        # (CCACHE_BASEDIR), so the objects scripts/build.sh compiled are reused.
        build_dir = os.path.join(ROOT, "build-pip-" + sysconfig.get_config_var("SOABI"))
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DGRADWIRE_WITH_TORCH=ON", "-DGRADWIRE_WITH_PYTHON=ON",
                     "-DGRADWIRE_BUILD_TESTS=OFF", "-DGRADWIRE_BUILD_BENCH=OFF",
                     f"-DGRADWIRE_PYTHON={sys.executable}"] + torch_cmake_args()
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        env = dict(os.environ, CCACHE_BASEDIR=ROOT)
        jobs = os.environ.get("GRADWIRE_JOBS", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True, env=env)
        subprocess.run(["cmake", "--build", build_dir, "--target", "gradwire_python", "-j", jobs],
                       check=True, env=env)
        built = os.path.join(build_dir, "python", "gradwire",
                             "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(built, target)


setup(
    packages=["gradwire"],
    package_dir={"gradwire": "python/gradwire"},
    ext_modules=[CMakeExtension("gradwire._C")],
    cmdclass={"build_ext": CMakeBuild},
)
