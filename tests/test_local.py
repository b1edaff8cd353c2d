"""facts/local.py: what a node reads of itself without the network."""

from __future__ import annotations

from netcheck.facts.local import socket_env


def test_socket_settings_say_which_file_each_came_from_and_the_environment_wins(tmp_path):
    """NCCL reads KEY=VALUE lines from NCCL_CONF_FILE (else ~/.nccl.conf) and /etc/nccl.conf,
    the environment first: each setting taken from a file is said to come from it."""
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_SOCKET_IFNAME=ib0\nNCCL_IB_HCA=mlx5\n")
    values, sources = socket_env({"NCCL_CONF_FILE": str(conf), "NCCL_IB_HCA": "mlx5_1"})
    assert values["NCCL_SOCKET_IFNAME"] == "ib0" and values["NCCL_IB_HCA"] == "mlx5_1"
    assert sources == {"NCCL_SOCKET_IFNAME": str(conf)}
