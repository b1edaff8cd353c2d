"""Tests of the simulated-cluster harness itself (tests/cluster.py)."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import Cluster, NodeSpec, cleanup_stale, netns_pids

PY = sys.executable
TESTS_DIR = Path(__file__).resolve().parent

# A TCP server on 0.0.0.0:PORT that says "ready" and then accepts and closes connections.
LISTENER = """
import socket, sys
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
while True:
    srv.accept()[0].close()
"""

# Connects to HOST PORT within TIMEOUT seconds and prints how it went, in netcheck's words.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("open")
except TimeoutError:
    print("filtered")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("error", e)
"""

# Receives N bytes and sends N bytes back, for the bandwidth-limit test.
ECHO_BULK = """
import socket, sys
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
conn = srv.accept()[0]
n = 0
while chunk := conn.recv(1 << 16):
    n += len(chunk)
conn.sendall(b"x" * n)
conn.close()
"""

# Sends N bytes to HOST PORT, then times the upload (until the first byte comes back)
# and the download separately: one number per direction of the link.
TIME_BULK = """
import socket, sys, time
n = int(sys.argv[3])
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
t0 = time.monotonic()
s.sendall(b"y" * n)
s.shutdown(socket.SHUT_WR)
got = len(s.recv(1 << 16))
t1 = time.monotonic()
while chunk := s.recv(1 << 16):
    got += len(chunk)
t2 = time.monotonic()
assert got == n, got
print(t1 - t0, t2 - t1)
"""

# Prints an interface's flags as ioctl(SIOCGIFFLAGS) reports them (what getifaddrs and
# psutil see).
SIOCGIFFLAGS = """
import fcntl, socket, struct, sys
req = struct.pack("16sH14x", sys.argv[1].encode(), 0)
print(struct.unpack("16sH14x", fcntl.ioctl(socket.socket(), 0x8913, req))[1])
"""

TWO = [NodeSpec(), NodeSpec()]


def readline(proc: subprocess.Popen, timeout: float = 5.0) -> str:
    """One line of proc's stdout, or fail (with its stderr) instead of blocking."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        pytest.fail(f"no output from {proc.args[-3:]} in {timeout}s: {proc.stderr.read()}")
    return proc.stdout.readline().strip()


def listen(c: Cluster, i: int, port: int) -> subprocess.Popen:
    p = c.popen(i, [PY, "-c", LISTENER, str(port)])
    assert readline(p) == "ready"
    return p


def connect(c: Cluster, frm: int, host: str, port: int, timeout: float = 0.5) -> str:
    res = c.run(frm, [PY, "-c", CONNECT, host, str(port), str(timeout)], timeout=10)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def our_namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def assert_gone(prefix: str, pids: list[int] = ()) -> None:
    assert our_namespaces(prefix) == []
    assert not [p for p in Path("/etc/netns").glob(prefix + "*")]
    assert [p for p in pids if alive(p)] == []


def alive(pid: int) -> bool:
    """Running, i.e. neither gone nor a zombie waiting for a parent outside our control."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


# --------------------------------------------------------------------------------------
# checks that need no root


def test_rejects_addresses_outside_benchmark_range():
    with pytest.raises(ValueError, match="198.18.0.0/15"):
        Cluster(TWO, subnet="10.0.0.0/24")


def test_rejects_interface_names_the_kernel_would_refuse():
    with pytest.raises(ValueError, match="interface name"):
        Cluster([NodeSpec(ifname="a-very-long-ifname")])


# --------------------------------------------------------------------------------------
# the cluster itself


def test_nodes_reach_each_other_over_the_switch(cluster):
    with cluster([NodeSpec(), NodeSpec(ifname="ens5", mtu=9000)]) as c:
        n0, n1 = c.nodes
        assert (n0.addr, n1.addr) == ("198.18.0.10", "198.18.0.11")
        listen(c, 0, 29500)
        listen(c, 1, 29500)
        assert connect(c, 0, n1.addr, 29500) == "open"
        assert connect(c, 1, n0.addr, 29500) == "open"
        mtu = c.run(1, ["cat", "/sys/class/net/ens5/mtu"], timeout=5).stdout
        assert mtu.strip() == "9000"
        v6 = c.run(1, ["ip", "-6", "addr", "show", "dev", "ens5"], timeout=5).stdout
        assert "scope link" in v6 and "tentative" not in v6  # bindable at once


def test_every_node_has_a_default_gateway_that_routes_nowhere_unless_left_out(cluster):
    """As real nodes have: a default route via the subnet's first address, a router that answers
    ARP and says "network unreachable" at once for what it cannot route (nothing leaves the
    machine); the subnet's own addresses stay on the switch."""
    with cluster(TWO) as c:
        assert c.gateways == ["198.18.0.1"]
        routes = c.run(0, ["ip", "-4", "route"], timeout=5).stdout
        assert "default via 198.18.0.1 dev eth0" in routes, routes
        assert connect(c, 0, "198.19.7.7", 29500, timeout=2) == "error [Errno 101] Network is unreachable"
        assert connect(c, 0, "198.18.0.11", 29500) == "refused"
        neighbours = c.run(0, ["ip", "neigh", "show", "198.18.0.1"], timeout=5).stdout
        assert "REACHABLE" in neighbours or "STALE" in neighbours or "DELAY" in neighbours, neighbours
    with cluster(TWO, gateway=False) as c:
        assert c.gateways == [] and c.gateway_ns is None
        assert "default" not in c.run(0, ["ip", "-4", "route"], timeout=5).stdout
        assert connect(c, 0, "198.19.7.7", 29500) == "error [Errno 101] Network is unreachable"


def test_each_node_has_its_own_hostname_and_fqdn(cluster):
    before = socket.gethostname()
    with cluster([NodeSpec(), NodeSpec(hostname="gpu-b")]) as c:
        for node in c.nodes:
            assert c.run(node.index, ["hostname"], timeout=5).stdout.strip() == node.hostname
            assert c.run(node.index, ["hostname", "-f"], timeout=5).stdout.strip() == node.fqdn
        assert [n.fqdn for n in c.nodes] == ["node0.cluster", "gpu-b.cluster"]
    assert socket.gethostname() == before  # the host's own hostname is untouched


def getent(c: Cluster, i: int, name: str) -> tuple[int, str]:
    res = c.run(i, ["getent", "hosts", name], timeout=5)
    return res.returncode, res.stdout.split()[0] if res.stdout else ""


def test_hosts_files_resolve_and_can_be_rewritten(cluster):
    with cluster(TWO) as c:
        assert getent(c, 0, "node1.cluster") == (0, "198.18.0.11")
        assert getent(c, 1, "node0") == (0, "198.18.0.10")
        # A process already running in the node sees a rewrite (same inode).
        resolve_on_enter = "import socket; input(); print(socket.gethostbyname('node0'))"
        waiter = c.popen(0, [PY, "-c", resolve_on_enter], stdin=subprocess.PIPE)
        c.write_hosts(0, ["127.0.1.1 node0.cluster node0", *c.hosts_lines(0, omit=[1])])
        assert getent(c, 0, "node0") == (0, "127.0.1.1")
        t0 = time.monotonic()
        assert getent(c, 0, "node1.cluster") == (2, "")  # 2: not found
        assert time.monotonic() - t0 < 2, "an unknown name must fail fast, not wait for DNS"
        assert getent(c, 1, "node1.cluster") == (0, "198.18.0.11")  # node1 is unchanged
        out, _ = waiter.communicate("\n", timeout=5)
        assert out.strip() == "127.0.1.1"


def test_drop_is_filtered_and_reject_is_refused(cluster):
    with cluster(TWO) as c:
        peer = c.nodes[1].addr
        for port in (29500, 29501, 29502):
            listen(c, 1, port)
        c.drop_inbound(1, 29500)
        c.reject_inbound(1, 29501)
        assert connect(c, 0, peer, 29500) == "filtered"
        assert connect(c, 0, peer, 29501) == "refused"
        assert connect(c, 0, peer, 29502) == "open"
        assert connect(c, 1, "127.0.0.1", 29500) == "open"  # loopback is spared
        c.clear_firewall(1)
        assert connect(c, 0, peer, 29500) == "open"


def test_allow_only_inbound_keeps_replies_to_own_connections(cluster):
    with cluster(TWO) as c:
        n0, n1 = c.nodes
        listen(c, 0, 40000)
        for port in (29500, 40000):
            listen(c, 1, port)
        c.allow_only_inbound(1, [29500])
        assert connect(c, 0, n1.addr, 29500) == "open"
        assert connect(c, 0, n1.addr, 40000) == "filtered"
        assert connect(c, 1, n0.addr, 40000) == "open"  # outgoing from node1 still works


def test_decoy_interface_is_running_with_an_address_but_leads_nowhere(cluster):
    with cluster(TWO) as c:
        for i in range(2):  # docker0 with the same address on every node
            c.add_decoy(i, "docker0", "198.19.255.1/24")
        state = c.run(0, ["cat", "/sys/class/net/docker0/operstate"], timeout=5).stdout
        assert state.strip() == "up"
        # IFF_RUNNING is not in /sys/class/net/*/flags (the kernel adds it only when
        # answering SIOCGIFFLAGS / netlink), so ask the way getifaddrs callers see it.
        flags = c.run(0, [PY, "-c", SIOCGIFFLAGS, "docker0"], timeout=5).stdout
        assert int(flags) & 0x40, "IFF_RUNNING"
        addrs = c.run(0, ["ip", "-o", "addr", "show"], timeout=5).stdout
        assert "inet 198.19.255.1/24" in addrs
        assert "docker0p" not in addrs  # the peer has no address at all, not even fe80::
        listen(c, 1, 29500)
        assert connect(c, 0, "198.19.255.1", 29500) == "refused"  # it is node0 itself
        assert connect(c, 0, "198.19.255.2", 29500, timeout=0.5) != "open"


def test_shape_limits_both_directions(cluster):
    with cluster(TWO) as c:
        c.shape(1, "20mbit")
        server = c.popen(1, [PY, "-c", ECHO_BULK, "29500"])
        assert readline(server) == "ready"
        n = 1_000_000  # 0.4 s each way at 20 Mbit/s; milliseconds unshaped
        res = c.run(0, [PY, "-c", TIME_BULK, c.nodes[1].addr, "29500", str(n)], timeout=20)
        assert res.returncode == 0, res.stderr
        up, down = map(float, res.stdout.split())
        assert 0.25 < up < 3 and 0.25 < down < 3, (up, down)


# --------------------------------------------------------------------------------------
# teardown


def test_down_kills_every_process_and_removes_everything(cluster):
    c = cluster(TWO).up()
    p = c.popen(0, ["sh", "-c", "setsid sleep 100 & exec sleep 100"])  # one escapes the group
    c.popen(1, ["sleep", "100"])
    time.sleep(0.2)
    pids = [pid for n in c.nodes for pid in netns_pids(n.ns)]
    assert len(pids) == 3
    c.down()
    assert_gone(c.prefix, pids)
    assert p.returncode == -signal.SIGKILL
    c.down()  # idempotent


def test_teardown_when_the_body_raises(cluster):
    with pytest.raises(RuntimeError, match="boom"):
        with cluster(TWO) as c:
            c.popen(0, ["sleep", "100"])
            pids = netns_pids(c.nodes[0].ns)
            raise RuntimeError("boom")
    assert_gone(c.prefix, pids)


def harness_process() -> subprocess.Popen:
    """A separate Python process that builds a cluster, prints its prefix and waits."""
    # The prefix is printed once the node's process is `sleep` itself: until then the shell
    # that sets its hostname (and its `hostname` child) are in the namespace too.
    code = (f"import sys, time; sys.path.insert(0, {str(TESTS_DIR)!r})\n"
            "from cluster import Cluster, NodeSpec\n"
            "c = Cluster([NodeSpec()]).up(); p = c.popen(0, ['sleep', '100'])\n"
            "while not open(f'/proc/{p.pid}/cmdline', 'rb').read().startswith(b'sleep'): time.sleep(0.01)\n"
            "print(c.prefix, flush=True); time.sleep(60)\n")
    return subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.root_required
def test_sigterm_tears_down():
    proc = harness_process()
    prefix = readline(proc)
    assert len(our_namespaces(prefix)) == 3   # the node, the switch, the gateway
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM, proc.stderr.read()
    proc.stderr.close(), proc.stdout.close()
    assert_gone(prefix)


@pytest.mark.root_required
def test_cleanup_stale_removes_leftovers_of_a_killed_run():
    proc = harness_process()
    prefix = readline(proc)
    pids = netns_pids(prefix + "n0")
    assert len(our_namespaces(prefix)) == 3 and len(pids) == 1
    proc.kill()  # no chance to clean up
    proc.wait(timeout=5)
    proc.stderr.close(), proc.stdout.close()
    # A concurrent test run may remove them first (its pid differs, ours is dead): so
    # check the end state, not what this call returned.
    cleanup_stale()
    assert_gone(prefix, pids)


# ---- forked runs (tests/forked.py) -------------------------------------------------------

SEEN_FROM_INSIDE = ("hostname", "fqdn", "hostname_addresses", "nics", "socket_env", "shm_bytes")


@pytest.mark.root_required
def test_a_forked_run_sees_its_node_as_a_fresh_one_does(tmp_path):
    """The same `netcheck local` forked and exec'd in a node with its own interface name,
    MTU and hostname: the same facts (namespace, /sys, /etc/hosts, hostname all entered), and
    the forked one's command line reads as the exec'd one's."""
    with Cluster([NodeSpec(), NodeSpec(ifname="ens5", mtu=9000, hostname="gpu-a7")]) as c:
        facts = []
        for p in (c.fork_netcheck(1, ["local", "--json", "-"]),
                  c.popen(1, [PY, "-m", "netcheck", "local", "--json", "-"])):
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            facts.append({k: json.loads(out)["nodes"][0]["facts"][k] for k in SEEN_FROM_INSIDE})
        # A host that waits for a joiner that never comes: its command line read while it waits.
        args = ["--rdzv", "node1:29500", "--nnodes", "2", "--node-rank", "0", "--timeout", "30", "--skip", "bandwidth"]
        host = c.fork_netcheck(1, args)
        wanted, shown, end = " ".join([PY, "-m", "netcheck", *args]), "", time.monotonic() + 20
        while not shown.startswith(wanted) and time.monotonic() < end and host.poll() is None:
            shown = Path(f"/proc/{host.pid}/cmdline").read_text()
            time.sleep(0.05)
        c.kill(host)
    assert facts[0] == facts[1] and facts[0]["hostname"] == "gpu-a7"
    nics = facts[0]["nics"]["nics"]
    assert [n["name"] for n in nics] == ["lo", "ens5"] and nics[1]["mtu"] == 9000
    assert shown.startswith(wanted), shown
