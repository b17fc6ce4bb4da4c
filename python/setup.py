"""Builds the msa PyTorch extension: CMake builds the static libmsa.a, and the op glue in csrc/
is linked against it and against the already-installed torch. Metadata (the distribution name
msa-attention, dependencies, extras, the vLLM plugin entry point) is in pyproject.toml; the
version is the CMake project version of the library.

The glue uses only torch's stable ABI (TORCH_TARGET_VERSION below) and CPython's limited API,
so one build loads into every torch from that version on and every CPython >= 3.10. Install
with ``pip install --no-build-isolation ./python`` (from the repository root) to build against
the torch already installed rather than a freshly downloaded one.

Environment variables:
  MSA_WITH_CUDA           auto (default), 1 or 0. auto builds the CUDA backend when torch is a
                          CUDA build and nvcc is found (CUDA_HOME or PATH).
  MSA_CUDA_ARCHITECTURES  CUDA architectures of the backend (default 90a).
  MAX_JOBS                parallel compile jobs for CMake (default 2).
  MSA_CMAKE_BUILD_DIR     CMake build directory (default python/build/libmsa-<cpu|cuda>).
  MSA_SANITIZE            debugging only: a -fsanitize= value (e.g. "address") applied to
                          libmsa.a and the extension. Run Python with the runtime and libstdc++
                          preloaded (else ASan's __cxa_throw interceptor aborts on the first C++
                          exception): LD_PRELOAD="$(g++ -print-file-name=libasan.so)
                          $(g++ -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0
                          (pytest captures stderr: add log_path=/tmp/asan to ASAN_OPTIONS).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

try:
    import torch
    from torch.utils import cpp_extension
except ImportError:  # pragma: no cover - exercised only without torch
    sys.exit(
        "msa: building the extension needs torch installed first, and pip must see it: "
        "run `pip install --no-build-isolation ./python`."
    )

PYTHON_DIR = Path(__file__).resolve().parent
REPO_DIR = PYTHON_DIR.parent


def _project_version() -> str:
    text = (REPO_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"project\(msa VERSION ([0-9.]+)", text)
    if match is None:
        sys.exit(f"msa: no `project(msa VERSION x.y.z` in {REPO_DIR / 'CMakeLists.txt'}")
    return match.group(1)


def _nvcc_path() -> str | None:
    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def _want_cuda() -> bool:
    setting = os.environ.get("MSA_WITH_CUDA", "auto").lower()
    available = torch.version.cuda is not None and _nvcc_path() is not None
    if setting in ("1", "on", "true", "yes"):
        if not available:
            sys.exit("msa: MSA_WITH_CUDA=1 needs a CUDA build of torch and nvcc")
        return True
    if setting in ("0", "off", "false", "no"):
        return False
    return available


WITH_CUDA = _want_cuda()
SANITIZE = os.environ.get("MSA_SANITIZE", "").strip()
SANITIZE_FLAGS = [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"] if SANITIZE else []


def _build_libmsa() -> Path:
    """Configures and builds the static library; returns the path of libmsa.a."""
    build_dir = Path(
        os.environ.get(
            "MSA_CMAKE_BUILD_DIR",
            PYTHON_DIR / "build" / ("libmsa-cuda" if WITH_CUDA else "libmsa-cpu"),
        )
    )
    cxx11_abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cxx_flags = " ".join([f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}"] + SANITIZE_FLAGS)
    configure = [
        "cmake",
        "-S",
        str(REPO_DIR),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DMSA_BUILD_TESTS=OFF",
        "-DMSA_BUILD_TOOLS=OFF",
        f"-DMSA_WITH_CUDA={'ON' if WITH_CUDA else 'OFF'}",
        # libmsa passes std::string across its API: the glue and libmsa use one libstdc++ ABI.
        f"-DCMAKE_CXX_FLAGS={cxx_flags}",
    ]
    if WITH_CUDA:
        configure += [
            f"-DCMAKE_CUDA_COMPILER={_nvcc_path()}",
            f"-DMSA_CUDA_ARCHITECTURES={os.environ.get('MSA_CUDA_ARCHITECTURES', '90a')}",
        ]
    subprocess.check_call(configure)
    jobs = os.environ.get("MAX_JOBS", "2")
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "msa", "-j", jobs])
    return build_dir / "libmsa.a"


class BuildExtension(cpp_extension.BuildExtension):
    """Builds libmsa.a with CMake before compiling and linking the extension."""

    def build_extensions(self) -> None:
        library = _build_libmsa()
        for extension in self.extensions:
            extension.extra_objects = [str(library)]
        super().build_extensions()


# The oldest torch whose stable ABI has everything the glue uses (boxed kernels with string
# arguments, get_num_threads, the current CUDA stream). Builds against newer headers still load
# into this torch and every later one.
TORCH_TARGET_VERSION = (2, 10)


def _extension() -> cpp_extension.CppExtension:
    sources = sorted(str(p.relative_to(PYTHON_DIR)) for p in (PYTHON_DIR / "csrc").glob("*.cpp"))
    include_dirs = [str(REPO_DIR / "include")]
    libraries: list[str] = []
    library_dirs: list[str] = []
    if WITH_CUDA:
        cuda_home = Path(_nvcc_path()).resolve().parent.parent
        include_dirs.append(str(cuda_home / "include"))
        # The kernels in libmsa.a are linked against the SHARED CUDA runtime (libcudart.so,
        # the soname torch itself loads), so the process has one runtime: a second, static
        # copy (cudart_static) would keep its own context/stream/module state next to torch's.
        # libmsa.a is a static archive, so its runtime references are resolved here, at the
        # extension's link; CMake's CUDA::cudart_static on the msa target never reaches it.
        # torch_cuda provides the current stream through the stable shim.
        library_dirs += [str(cuda_home / "lib64"), str(cuda_home / "lib")]
        libraries += ["torch_cuda", "cudart", "dl", "rt", "pthread"]
    major, minor = TORCH_TARGET_VERSION
    target = f"0x{major:02x}{minor:02x}000000000000"
    return cpp_extension.CppExtension(
        name="msa._C",
        sources=sources,
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        libraries=libraries,
        # CPython's limited API (cpp_extension sets Py_LIMITED_API to 3.10): an abi3 wheel.
        py_limited_api=True,
        extra_compile_args={
            "cxx": [
                "-O2",
                f"-DMSA_TORCH_WITH_CUDA={int(WITH_CUDA)}",
                # Declares the CUDA part of torch's C shim (the current CUDA stream).
                *(["-DUSE_CUDA=1"] if WITH_CUDA else []),
                f"-DTORCH_TARGET_VERSION={target}",
                "-Werror=return-type",
            ]
            + SANITIZE_FLAGS
        },
        extra_link_args=SANITIZE_FLAGS,
    )


setup(
    version=_project_version(),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
