"""envinfo on this machine (CPU torch, no NVIDIA driver) and over small fixture files."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import threading

import pytest
import torch

from netcheck.core import codec
from netcheck.core.envfacts import EnvFacts
from netcheck.facts.envinfo import (
    bounded,
    conf_file,
    decode_cuda_version,
    decode_cudnn_version,
    decode_nccl_version,
    gather_env,
    library_version,
    mapped_library,
    nccl_loaded,
    package_facts,
    parse_driver_version,
    pretty_name,
    var_facts,
)
from netcheck.facts.hashing import hash_path

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def facts() -> EnvFacts:
    env = {"NCCL_IB_DISABLE": "1", "TORCH_NCCL_BLOCKING_WAIT": "1", "GLOO_SOCKET_IFNAME": "eth0",
           "MASTER_PORT": "29500", "OMP_NUM_THREADS": "4", "LD_LIBRARY_PATH": "/opt/lib",
           "PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "hunter2", "HOME": "/nonexistent-home"}
    return gather_env(hash_paths=(os.path.dirname(__file__),), env=env)


def test_torch_and_python_facts(facts):
    v = facts.values
    assert v["torch.version"] == torch.__version__
    assert v["torch.git_version"] == torch.version.git_version
    assert v["torch.cuda_build"] == (torch.version.cuda or "none")
    assert re.fullmatch(r"\d+\.\d+\.\d+", v["python.version"])
    assert v["python.implementation"] and v["python.executable"]


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_without_cuda_the_gpu_facts_say_so(facts):
    v = facts.values
    assert v["gpu.count"] == "no CUDA"
    assert not any(k.startswith("gpu.0.") for k in v)
    assert v["nccl.loaded"] == "not loaded"
    if not torch.version.cuda:
        assert v["cuda.runtime"] == "no CUDA"
        # The CPU build has no torch._C._nccl_version: torch.cuda.nccl.version() raises there.
        assert v["nccl.compiled"] == "not built with NCCL"


def test_variables_come_from_the_environment_passed(facts):
    variables = {k: v for k, v in facts.values.items() if k.startswith("var.")}
    assert variables == {"var.NCCL_IB_DISABLE": "1", "var.TORCH_NCCL_BLOCKING_WAIT": "1",
                         "var.GLOO_SOCKET_IFNAME": "eth0", "var.MASTER_PORT": "29500",
                         "var.OMP_NUM_THREADS": "4", "var.LD_LIBRARY_PATH": "/opt/lib"}
    assert var_facts({}) == {}


def test_the_other_families_are_present(facts):
    v = facts.values
    for key in ("os.release", "os.kernel", "libc.version", "cpu.model", "cpu.count",
                "driver.version", "cudnn.version", "file./etc/nccl.conf", "file.~/.nccl.conf"):
        assert v[key], key
    assert v["shm.bytes"].isdigit() or v["shm.bytes"].startswith("unreadable: ")
    assert v["file.~/.nccl.conf"] == "absent"       # HOME came from the environment passed
    assert v["pkg.torch"] == torch.__version__
    assert v[f"hash.{os.path.dirname(__file__)}"].startswith("sha256 ")
    assert list(v) == sorted(v)


def test_facts_survive_the_json_codec(facts):
    back = codec.loads(EnvFacts, codec.dumps(facts), 1 << 20)
    assert back == facts


def test_packages_absent_and_nvidia_only_when_installed():
    found = package_facts(("numpy", "Not_A-Real.Package"))
    assert found["pkg.numpy"] == __import__("numpy").__version__
    assert found["pkg.not-a-real-package"] == "absent"
    installed = {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
    for key in found:
        if key.startswith("pkg.nvidia-"):
            assert key[4:] in installed


# ---------------------------------------------------------------------------- --hash

def test_hash_of_a_file(tmp_path):
    f = tmp_path / "model.py"
    f.write_bytes(b"print('hello')\n")
    expected = hashlib.sha256(b"print('hello')\n").hexdigest()
    assert hash_path(str(f)) == f"sha256 {expected} (1 file, 15 bytes)"


def _tree(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("a = 1\n")
    (root / "b.txt").write_text("b\n")
    (root / "empty").mkdir()
    return root


def test_hash_of_a_folder_follows_content_and_names(tmp_path):
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    first = hash_path(str(one))
    assert re.fullmatch(r"sha256 [0-9a-f]{64} \(2 files, 8 bytes\)", first)
    assert hash_path(str(two)) == first                      # same tree elsewhere: same hash
    (two / "__pycache__").mkdir()
    (two / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0mtime")
    assert hash_path(str(two)) == first                      # bytecode caches are left out
    (two / "pkg" / "a.py").write_text("a = 2\n")
    assert hash_path(str(two)) != first                      # content
    (two / "pkg" / "a.py").write_text("a = 1\n")
    (two / "b.txt").rename(two / "c.txt")
    assert hash_path(str(two)) != first                      # names


def test_hash_records_links_and_skips_special_files(tmp_path):
    root = _tree(tmp_path / "t")
    (root / "link").symlink_to("/etc")                       # not followed
    os.mkfifo(root / "fifo")                                 # reading it would block
    value = hash_path(str(root))
    assert value.startswith("sha256 ") and "(2 files, 8 bytes)" in value


def test_hash_bounds_are_reported(tmp_path):
    root = tmp_path / "big"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}").write_bytes(b"x" * 1024)
    assert hash_path(str(root), max_bytes=2500) == \
        "incomplete: over 2.4 KiB after 2 files (3 KiB read)"
    assert hash_path(str(root / "f0"), max_bytes=1000) == \
        "incomplete: over 1000 bytes: the file is 1 KiB"
    assert hash_path(str(root), max_seconds=0).startswith("incomplete: over 0 s after 0 files")


def test_unreadable_paths_are_recorded(tmp_path):
    assert hash_path(str(tmp_path / "missing")).startswith("unreadable: FileNotFoundError")
    os.mkfifo(tmp_path / "fifo")
    assert hash_path(str(tmp_path / "fifo")).startswith("unreadable: ")
    assert pretty_name(str(tmp_path / "os-release")).startswith("unreadable: FileNotFoundError")
    if os.geteuid() != 0:                                    # root reads mode-000 files anyway
        (tmp_path / "secret").write_text("x")
        (tmp_path / "secret").chmod(0)
        assert hash_path(str(tmp_path / "secret")).startswith("unreadable: PermissionError")


# ---------------------------------------------------------------------------- parsers

def test_nccl_conf_small_file_is_recorded_with_its_hash(tmp_path):
    conf = tmp_path / ".nccl.conf"
    conf.write_text("# site settings\nNCCL_IB_HCA=mlx5_0\n\nNCCL_DEBUG=WARN\n")
    digest = hashlib.sha256(conf.read_bytes()).hexdigest()[:16]
    assert conf_file(str(conf)) == f"sha256 {digest}, 52 bytes: NCCL_IB_HCA=mlx5_0; NCCL_DEBUG=WARN"
    assert conf_file(str(tmp_path / "none")) == "absent"
    facts = gather_env(env={"HOME": str(tmp_path), "NCCL_CONF_FILE": str(conf)}).values
    assert facts["file.~/.nccl.conf"] == facts["file.$NCCL_CONF_FILE"] == conf_file(str(conf))


def test_nccl_conf_file_naming_a_fifo_or_a_device_is_unreadable_at_once(tmp_path):
    fifo = tmp_path / "conf.fifo"
    os.mkfifo(fifo)  # opening it to read would block until a writer came
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(conf_file(p) for p in (str(fifo), "/dev/zero")),
                              daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "conf_file blocked"
    assert said == [f"unreadable: {fifo} is not a regular file", "unreadable: /dev/zero is not a regular file"]


def test_a_large_nccl_conf_file_gets_a_bounded_hash_only(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\n" * 10_000)
    assert conf_file(str(conf)).startswith("sha256 ") and "NCCL_DEBUG" not in conf_file(str(conf))


def test_driver_version_from_both_module_flavours():
    closed = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 "
              "UTC 2023\nGCC version:  gcc version 12.2.0 (GCC)\n")
    open_ = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n")
    assert parse_driver_version(closed) == "535.129.03"
    assert parse_driver_version(open_) == "550.54.15"
    assert parse_driver_version("garbage") is None


def test_version_codes_decode():
    assert decode_nccl_version(2708) == "2.7.8"          # NCCL <= 2.8: X*1000 + Y*100 + Z
    assert decode_nccl_version(21805) == "2.18.5"        # from 2.9: X*10000 + Y*100 + Z
    assert decode_cuda_version(12040) == "12.4"
    assert decode_cudnn_version(90100) == "9.1.0"
    assert decode_cudnn_version(8902) == "8.9.2"


def test_loaded_library_found_through_the_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /opt/aws-ofi-nccl/lib/libnccl-net.so\n"
        "7f01-7f02 r-xp 00000000 08:01 2 /venv/nvidia/nccl/lib/libnccl.so.2\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n")
    assert mapped_library(re.compile(r"lib[nr]ccl(-[0-9a-f]{8})?\.so"), str(maps)) == \
        "/venv/nvidia/nccl/lib/libnccl.so.2"
    loaded = nccl_loaded(str(maps))                          # mapped there, not on this disk
    assert loaded["nccl.library"] == "/venv/nvidia/nccl/lib/libnccl.so.2"
    assert loaded["nccl.loaded"].startswith("unreadable: OSError")
    assert library_version(re.compile("libnothing"), "f", str, str(maps)) == ("not loaded", None)


def test_long_values_are_cut_with_the_hash_of_the_whole():
    assert bounded("short") == "short"
    cut = bounded("x" * 5000, limit=10)
    assert cut.startswith("xxxxxxxxxx... (5000 chars, sha256 ") and len(cut) < 60


def test_the_modules_import_without_torch():
    code = ("import sys, netcheck.facts.envinfo, netcheck.rules.env; "
            "assert 'torch' not in sys.modules, 'torch imported at module import'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
