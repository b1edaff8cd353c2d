"""Phase 6, env: this node's versions and settings as one flat map of dotted keys.

Every fact is a string under a dotted key, so `rules.env` compares any two nodes the same
way, whatever the key. What cannot be read is recorded as "unreadable: <reason>", what is
not there says so ("no CUDA", "not loaded", "absent"), nothing is guessed. torch is
imported inside the functions that need it, never at module import (the reach phase runs
before torch). `netcheck local -v` prints the facts; on a GPU node:

    cuda.runtime         12.4
    driver.version       550.54.15
    gpu.0.name           NVIDIA H100 80GB HBM3
    nccl.compiled        2.21.5
    nccl.loaded          2.21.5
    nccl.library         /venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2
    pkg.nvidia-nccl-cu12 2.21.5
    torch.version        2.5.1+cu124
    var.NCCL_IB_HCA      mlx5_0,mlx5_1
    hash./opt/code       sha256 9f86d081884c... (812 files, 14.2 MiB)

Note: on a CUDA build, the GPU facts initialise CUDA in this process (as any
torch.cuda.get_device_properties call does); processes that need CUDA must then be
spawned, not forked, from it.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import platform
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType

from netcheck.core.constants import HASH_MAX_BYTES, HASH_MAX_SECONDS
from netcheck.core.envfacts import ABSENT, NO_CUDA, NOT_LOADED, EnvFacts
from netcheck.core.fields import valid_text
from netcheck.facts.hashing import hash_path, unreadable

# Packages whose versions are always recorded ("absent" when not installed). Every other
# installed nvidia-* distribution (the CUDA libraries torch's wheels pull in) is added.
DEFAULT_PACKAGES = (
    "torch", "torchvision", "torchaudio", "triton", "numpy", "nvidia-nccl-cu12",
    "deepspeed", "accelerate", "transformers", "megatron-core", "transformer-engine",
    "flash-attn", "xformers", "apex",
)
# Environment variables recorded (by prefix, or by exact name).
VAR_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "TP_", "CUDA_", "MASTER_", "OMP_", "PYTORCH_",
                "NVIDIA_", "UCX_", "FI_")
VAR_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD")
# NCCL reads these besides the environment (NCCL_CONF_FILE replaces the user's file).
NCCL_CONF_FILES = ("/etc/nccl.conf", "~/.nccl.conf")
CONF_INLINE_BYTES = 2048   # a conf file up to this size is recorded in full, beside its hash
MAX_VALUE_CHARS = 2000     # longer values are cut, with the full value's hash appended
# Folders left out of a folder's hash: they differ between identical checkouts (bytecode
# caches embed source mtimes, a git index embeds inode and stat data).

# Library file names in /proc/self/maps; old torch wheels bundled hashed copies
# ("libcudart-9335f6a2.so.11.0"). The NCCL net plugin (libnccl-net.so) is not NCCL.
CUDART = re.compile(r"libcudart(-[0-9a-f]{8})?\.so")
LIBNCCL = re.compile(r"lib[nr]ccl(-[0-9a-f]{8})?\.so")
LIBTORCH_CUDA = re.compile(r"libtorch_cuda\.so")

NVML_ERROR_DRIVER_NOT_LOADED = 9   # nvml.h: the library is there, the kernel driver is not


def gather_env(hash_paths: Iterable[str] = (), env: Mapping[str, str] | None = None,
               packages: Iterable[str] = DEFAULT_PACKAGES, *,
               hash_max_bytes: int = HASH_MAX_BYTES,
               hash_max_seconds: float = HASH_MAX_SECONDS) -> EnvFacts:
    """Every fact family of this node; `env` is the environment to record (os.environ)."""
    start = time.monotonic()
    env = os.environ if env is None else env
    values = {**python_facts(), **torch_facts(), **driver_facts(), **os_facts(),
              **cpu_facts(), **package_facts(packages), **var_facts(env),
              **nccl_conf_facts(env), **shm_facts()}
    for path in hash_paths:
        values[f"hash.{path}"] = hash_path(path, hash_max_bytes, hash_max_seconds)
    values = {k: bounded(v) for k, v in sorted(values.items())}
    return EnvFacts(values, round(time.monotonic() - start, 3))


def bounded(value: str, limit: int = MAX_VALUE_CHARS) -> str:
    value = valid_text(value)
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode(errors="replace")).hexdigest()[:16]
    return f"{value[:limit]}... ({len(value)} chars, sha256 {digest})"


# ---------------------------------------------------------------------------- python, torch

def python_facts() -> dict[str, str]:
    return {"python.version": platform.python_version(),
            "python.implementation": platform.python_implementation(),
            "python.executable": sys.executable or unreadable("sys.executable is empty")}


def torch_facts() -> dict[str, str]:
    """torch's build, then the CUDA, cuDNN, NCCL and GPU facts it leads to."""
    try:
        import torch
    except (ImportError, OSError) as e:
        why = unreadable(e)
        return {k: why for k in ("torch.version", "cuda.runtime", "nccl.compiled", "gpu.count")}
    return {**torch_build_facts(torch), **cuda_facts(torch), **nccl_facts(torch),
            **gpu_facts(torch)}


def torch_build_facts(torch: ModuleType) -> dict[str, str]:
    return {"torch.version": str(torch.__version__),
            "torch.git_version": str(getattr(torch.version, "git_version", None) or "unknown"),
            "torch.cuda_build": str(torch.version.cuda or "none"),
            "torch.hip_build": str(getattr(torch.version, "hip", None) or "none"),
            "torch.debug": str(bool(getattr(torch.version, "debug", False))).lower()}


def cuda_facts(torch: ModuleType) -> dict[str, str]:
    """The CUDA runtime actually loaded (torch.version.cuda is what torch was built for)."""
    runtime, _ = library_version(CUDART, "cudaRuntimeGetVersion", decode_cuda_version)
    if runtime == NOT_LOADED and not torch.version.cuda:
        runtime = NO_CUDA
    return {"cuda.runtime": runtime, "cudnn.version": cudnn_version(torch)}


def cudnn_version(torch: ModuleType) -> str:
    try:
        version = torch.backends.cudnn.version()
    except RuntimeError as e:   # torch raises when the loaded cuDNN does not fit its build
        return unreadable(e)
    return "none" if version is None else decode_cudnn_version(version)


def nccl_facts(torch: ModuleType) -> dict[str, str]:
    return {"nccl.compiled": nccl_compiled(torch), **nccl_loaded()}


def nccl_compiled(torch: ModuleType) -> str:
    # A build without NCCL (CPU, macOS) has no torch._C._nccl_version, and
    # torch.cuda.nccl.version() raises AttributeError there instead of saying so.
    if not hasattr(torch._C, "_nccl_version"):
        return "not built with NCCL"
    parts = torch.cuda.nccl.version()
    text = ".".join(str(p) for p in parts[:3])
    return f"{text}-{parts[3]}" if len(parts) > 3 else text


def nccl_loaded(maps: str = "/proc/self/maps") -> dict[str, str]:
    """ncclGetVersion from the libnccl (or librccl) mapped into this process.

    Older torch wheels link NCCL statically into libtorch_cuda.so: asked there when no
    libnccl is mapped (a miss there means NCCL is not loaded at all).
    """
    version, path = library_version(LIBNCCL, "ncclGetVersion", decode_nccl_version, maps)
    if version == NOT_LOADED:
        version, path = library_version(LIBTORCH_CUDA, "ncclGetVersion", decode_nccl_version,
                                        maps)
        if version.startswith("unreadable: AttributeError"):
            version, path = NOT_LOADED, None
    return {"nccl.loaded": version, "nccl.library": path or "none"}


def library_version(name: re.Pattern, symbol: str, decode: Callable[[int], str],
                    maps: str = "/proc/self/maps") -> tuple[str, str | None]:
    """Call `int symbol(int *)` in the first mapped library whose file name matches `name`."""
    path = mapped_library(name, maps)
    if path is None:
        return NOT_LOADED, None
    if path.endswith(" (deleted)"):
        return unreadable(f"{path}: the loaded file was deleted from disk"), path
    try:   # dlopen of a library already mapped returns the mapped one
        function = getattr(ctypes.CDLL(path), symbol)
    except (OSError, AttributeError) as e:
        return unreadable(e), path
    out = ctypes.c_int(0)
    status = function(ctypes.byref(out))
    if status != 0:
        return unreadable(f"{symbol} returned error {status}"), path
    return decode(out.value), path


def mapped_library(name: re.Pattern, maps: str = "/proc/self/maps") -> str | None:
    """The path of the first library in /proc/self/maps whose file name matches `name`."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)   # address perms offset dev inode path
        if len(fields) == 6 and name.match(os.path.basename(fields[5])):
            return fields[5]
    return None


def decode_nccl_version(code: int) -> str:
    """NCCL_VERSION(X,Y,Z) is X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 (nccl.h);
    CUDNN_VERSION likewise before and from cuDNN 9 (cudnn_version.h)."""
    major_div = 10000 if code >= 10000 else 1000
    return f"{code // major_div}.{code % major_div // 100}.{code % 100}"


decode_cudnn_version = decode_nccl_version


def decode_cuda_version(code: int) -> str:
    """cudaRuntimeGetVersion: 1000*major + 10*minor (12040 -> 12.4)."""
    return f"{code // 1000}.{code % 1000 // 10}"


def gpu_facts(torch: ModuleType) -> dict[str, str]:
    """Count, name, memory and UUID of each GPU this process can see; "no CUDA" without."""
    if not torch.version.cuda and not getattr(torch.version, "hip", None):
        return {"gpu.count": NO_CUDA}
    try:
        if not torch.cuda.is_available():
            return {"gpu.count": NO_CUDA}
        count = torch.cuda.device_count()
        # What the build carries (sm_XY cubins, compute_XY PTX) and what the driver runs: set
        # against each GPU's capability by gpu.build.
        facts = {"gpu.count": str(count), "torch.arch_list": " ".join(torch.cuda.get_arch_list()),
                 "driver.cuda": driver_cuda_version()}
        for i in range(count):
            p = torch.cuda.get_device_properties(i)
            facts |= {f"gpu.{i}.name": str(p.name), f"gpu.{i}.memory": str(p.total_memory),
                      f"gpu.{i}.uuid": str(getattr(p, "uuid", "unknown")),
                      f"gpu.{i}.capability": f"{p.major}.{p.minor}"}
    except RuntimeError as e:
        return {"gpu.count": unreadable(e)}
    return facts


def driver_cuda_version() -> str:
    """The newest CUDA the driver runs (cuDriverGetVersion in libcuda, which CUDA has loaded)."""
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) != 0:
            return unreadable("cuDriverGetVersion failed")
    except (OSError, AttributeError) as e:
        return unreadable(e)
    return decode_cuda_version(version.value)


# ---------------------------------------------------------------------------- driver

def driver_facts(proc: str = "/proc") -> dict[str, str]:
    """/proc/driver/nvidia/version, else NVML, else "no NVIDIA driver"."""
    path = os.path.join(proc, "driver/nvidia/version")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return {"driver.version": nvml_driver_version() or "no NVIDIA driver"}
    except OSError as e:
        return {"driver.version": unreadable(e)}
    version = parse_driver_version(text)
    return {"driver.version": version or unreadable(f"{path} says {text[:80]!r}")}


_NVRM = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def parse_driver_version(text: str) -> str | None:
    """"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct ..." -> "535.129.03"
    (also the open modules' "... Open Kernel Module for x86_64  550.54.15  Release Build ...")."""
    match = _NVRM.search(text)
    return match.group(1) if match else None


def nvml_driver_version() -> str | None:
    """nvmlSystemGetDriverVersion through libnvidia-ml, without nvidia-smi; None without NVML."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        init = getattr(nvml, "nvmlInit_v2", None) or nvml.nvmlInit
    except (OSError, AttributeError):
        return None
    status = init()
    if status == NVML_ERROR_DRIVER_NOT_LOADED:
        return None
    if status != 0:
        return unreadable(f"nvmlInit returned error {status}")
    buffer = ctypes.create_string_buffer(96)   # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    status = nvml.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(len(buffer)))
    nvml.nvmlShutdown()
    if status != 0:
        return unreadable(f"nvmlSystemGetDriverVersion returned error {status}")
    return buffer.value.decode(errors="replace")


# ---------------------------------------------------------------------------- os, cpu, shm

def os_facts(os_release: str = "/etc/os-release") -> dict[str, str]:
    return {"os.release": pretty_name(os_release), "os.kernel": platform.release(),
            "libc.version": libc_version()}


def pretty_name(path: str = "/etc/os-release") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return unreadable(e)
    for line in lines:
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip("\"'")
    return unreadable(f"no PRETTY_NAME in {path}")


def libc_version() -> str:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")   # "glibc 2.36"
    except (ValueError, OSError):
        text = None
    if text:
        return text
    name, version = platform.libc_ver()
    return f"{name} {version}" if name else unreadable("confstr and platform.libc_ver are silent")


def cpu_facts(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu.model": cpu_model(cpuinfo), "cpu.count": str(os.cpu_count()),
            "cpu.usable": str(usable)}


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError as e:
        return unreadable(e)
    return platform.processor() or unreadable(f"no model name in {cpuinfo}")


def shm_facts(path: str = "/dev/shm") -> dict[str, str]:
    try:
        st = os.statvfs(path)
    except OSError as e:
        return {"shm.bytes": unreadable(e)}
    return {"shm.bytes": str(st.f_frsize * st.f_blocks)}


# ---------------------------------------------------------------------------- packages, variables

def canonical_package(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_facts(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, str]:
    """pkg.NAME -> version or "absent" for each named package, plus every installed nvidia-*."""
    facts = {f"pkg.{canonical_package(p)}": package_version(p) for p in packages}
    for dist in importlib.metadata.distributions():
        name = canonical_package(dist.metadata["Name"] or "")
        if name.startswith("nvidia-") and f"pkg.{name}" not in facts:
            facts[f"pkg.{name}"] = dist.version
    return facts


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ABSENT


def var_facts(env: Mapping[str, str]) -> dict[str, str]:
    return {f"var.{k}": v for k, v in env.items() if k.startswith(VAR_PREFIXES) or k in VAR_NAMES}


def nccl_conf_facts(env: Mapping[str, str]) -> dict[str, str]:
    """file.PATH for the nccl.conf files NCCL reads; "~" is this environment's HOME."""
    home = env.get("HOME") or os.path.expanduser("~")
    facts = {f"file.{p}": conf_file(p.replace("~", home, 1)) for p in NCCL_CONF_FILES}
    if env.get("NCCL_CONF_FILE"):
        facts["file.$NCCL_CONF_FILE"] = conf_file(env["NCCL_CONF_FILE"])
    return facts


def conf_file(path: str) -> str:
    """"absent", or the content's hash followed by the settings when the file is small.
    NCCL_CONF_FILE may name anything: a FIFO would block the open, a device never end."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return unreadable(f"{path} is not a regular file")
        with open(path, "rb") as f:
            data = f.read(CONF_INLINE_BYTES + 1)
    except FileNotFoundError:
        return ABSENT
    except OSError as e:
        return unreadable(e)
    if len(data) > CONF_INLINE_BYTES:
        return hash_path(path)  # bounded in bytes and time
    head = f"sha256 {hashlib.sha256(data).hexdigest()[:16]}, {len(data)} bytes"
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines()]
    settings = "; ".join(ln for ln in lines if ln and not ln.startswith("#"))
    return f"{head}: {settings or '(no settings)'}"
