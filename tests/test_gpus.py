"""How many GPUs a process may use, as the default --nproc-per-node counts them: the
driver's list, the device nodes this process can open, CUDA_VISIBLE_DEVICES. Read from
folders laid out as /proc and /dev are (regular files stand in for device nodes this process
may open, dangling links for those a cgroup denies)."""

from __future__ import annotations

import os

import pytest

from netcheck.facts.local import usable_gpus


@pytest.fixture
def node(tmp_path):
    """A node with 8 GPUs, of which this process may open `granted` (the cgroup's share)."""
    def make(granted: int = 8):
        gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
        gpus.mkdir(parents=True, exist_ok=True)
        dev = tmp_path / "dev"
        dev.mkdir(exist_ok=True)
        for i in range(8):
            (gpus / f"0000:{i:02x}:00.0").mkdir(exist_ok=True)
            if i < granted:
                (dev / f"nvidia{i}").write_bytes(b"")
            else:
                os.symlink(tmp_path / "denied", dev / f"nvidia{i}")
        (dev / "nvidiactl").write_bytes(b"")
        return str(tmp_path / "proc"), str(dev)
    return make


def test_every_gpu_of_the_driver_when_nothing_restricts(node):
    proc, dev = node()
    assert usable_gpus({}, proc, dev) == 8


def test_a_cgroup_that_grants_four_devices_gives_four(node):
    proc, dev = node(granted=4)   # Slurm --gres=gpu:4 on an 8-GPU node
    assert usable_gpus({}, proc, dev) == 4


@pytest.mark.parametrize("visible,count", [
    ("0,1", 2), ("", 0), ("3", 1), ("0,1,9,2", 2), ("-1", 0), ("GPU-8a1b,GPU-77c0", 2), ("1, 2", 2),
])
def test_cuda_visible_devices_up_to_its_first_unknown_entry(node, visible, count):
    proc, dev = node()
    assert usable_gpus({"CUDA_VISIBLE_DEVICES": visible}, proc, dev) == count


def test_no_driver_no_gpus(tmp_path):
    assert usable_gpus({}, str(tmp_path), str(tmp_path)) == 0
