"""facts/buffers.py: a namespace's TCP buffer bounds as the kernel writes them under /proc/sys (a
tree built here; the real sysctls of a namespace are set in tests/test_buffers_cluster.py)."""

from __future__ import annotations

from netcheck.core.model import SocketBuffers, TcpMem
from netcheck.facts.buffers import read_buffers


def tree(tmp_path, **values: str):
    for name, value in values.items():
        path = tmp_path / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return str(tmp_path)


def test_tcp_rmem_and_wmem_with_net_cores_caps_and_the_two_switches(tmp_path):
    root = tree(tmp_path, **{"net.ipv4.tcp_rmem": "4096\t4096\t4096", "net.ipv4.tcp_wmem": "4096 16384 4194304",
                             "net.core.rmem_max": "212992", "net.core.wmem_max": "212992",
                             "net.ipv4.tcp_window_scaling": "0", "net.ipv4.tcp_moderate_rcvbuf": "1"})
    assert read_buffers(root) == SocketBuffers(TcpMem(4096, 4096, 4096), TcpMem(4096, 16384, 4194304), 212992,
                                               212992, False, True)


def test_a_container_without_net_cores_caps_or_the_switches_reads_them_unknown_and_on(tmp_path):
    root = tree(tmp_path, **{"net.ipv4.tcp_rmem": "4096 131072 6291456", "net.ipv4.tcp_wmem": "4096 16384 4194304"})
    read = read_buffers(root)
    assert read is not None and (read.rmem_max, read.wmem_max, read.window_scaling, read.moderate_rcvbuf) == \
        (None, None, True, True)


def test_without_tcp_rmem_and_wmem_nothing_is_read(tmp_path):
    assert read_buffers(str(tmp_path)) is None
    assert read_buffers(tree(tmp_path, **{"net.ipv4.tcp_rmem": "4096 131072", "net.ipv4.tcp_wmem": "1 2 3"})) is None


def test_this_namespaces_bounds_are_read():
    read = read_buffers()
    assert read is not None and 0 < read.wmem.min <= read.wmem.max and 0 < read.rmem.min <= read.rmem.max
