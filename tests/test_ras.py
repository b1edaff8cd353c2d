"""NCCL's RAS client against a small server on loopback that speaks the documented protocol
(NVIDIA/nccl src/ras/client_support.cc): `CLIENT PROTOCOL 2` / `SERVER PROTOCOL 2`,
`SET FORMAT json` (NCCL >= 2.28.7; older ones answer `ERROR: Unknown command`), `STATUS`
answered with the report and the connection closed. A real NCCL needs a GPU machine."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from netcheck.core.deadline import Deadline
from netcheck.facts.ras import query_ras
from netcheck.rules.job import ras_findings
from nodes import free_port

STATUS = {
    "nccl_version": "2.29.1", "cuda_runtime_version": 13000, "communicators_count": 1,
    "communicators": [{
        "hash": "0xae94423cfbb2ef4a", "size": 3, "ranks_count": 2, "missing_ranks_count": 1,
        "ranks": [
            {"rank": 0, "host": "198.18.0.10", "pid": 11, "cuda_dev": 0,
             "status": {"init_state": 0, "async_error": 0, "finalize_called": False, "abort_flag": False}},
            {"rank": 1, "host": "198.18.0.11", "pid": 12, "cuda_dev": 0,
             "status": {"init_state": 0, "async_error": 0, "finalize_called": False, "abort_flag": False}}],
        "missing_ranks": [{"rank": 2, "host": "198.18.0.12", "pid": 13,
                           "status": {"unresponsive": True, "considered_dead": True}}]}],
    "ras": {"collection_time_sec": 0.0, "timeouts_count": 0}}

TEXT_STATUS = """NCCL version 2.26.2+cuda12.8 compiled with CUDA 12.8

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         3         1         3         3   RUNNING  INCOMPLETE

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
"""


class FakeRas:
    """One connection at a time, answered as NCCL's RAS thread answers."""

    def __init__(self, status: str, json_format: bool = True, hello: str = "SERVER PROTOCOL 2"):
        self.status, self.json_format, self.hello = status, json_format, hello
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.received: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rwb") as f:
            for raw in f:
                line = raw.decode().strip()
                self.received.append(line)
                if line.startswith("CLIENT PROTOCOL"):
                    f.write(f"{self.hello}\n".encode())
                elif line == "SET FORMAT json":
                    f.write(b"OK\n" if self.json_format else b"ERROR: Unknown command SET\n")
                elif line == "STATUS":
                    f.write(self.status.encode())
                    f.flush()
                    return
                f.flush()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.fixture
def ras_server():
    servers = []

    def make(*args, **kwargs) -> FakeRas:
        servers.append(FakeRas(*args, **kwargs))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


def test_a_json_status_names_the_missing_and_dead_ranks(ras_server):
    server = ras_server(json.dumps(STATUS, indent=2) + "\n")
    view = query_ras(server.address, Deadline(5))
    assert server.received == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]
    assert view.answered and view.nccl_version == "2.29.1" and view.error == ""
    (comm,) = view.communicators
    assert [(r.rank, r.state) for r in comm.ranks] == [(0, "ok"), (1, "ok"), (2, "dead")]
    (finding,) = ras_findings(view)
    assert (finding.check, finding.severity, finding.kind) == ("job.nccl", "fail", "ranks_missing")
    assert finding.evidence == ("communicator 0xae94423cfbb2ef4a (3 ranks): rank 2 on 198.18.0.12 (pid 13): dead",)


def test_a_healthy_json_status_passes(ras_server):
    healthy = {**STATUS, "communicators": [{**STATUS["communicators"][0], "missing_ranks": [], "size": 2}]}
    (finding,) = ras_findings(query_ras(ras_server(json.dumps(healthy)).address, Deadline(5)))
    assert finding.severity == "pass" and "1 communicator(s), every rank present" in finding.summary


def test_an_older_nccl_answering_in_text_is_read_for_its_error_words(ras_server):
    server = ras_server(TEXT_STATUS, json_format=False)
    view = query_ras(server.address, Deadline(5))
    assert view.answered and view.text == TEXT_STATUS
    (finding,) = ras_findings(view)
    assert (finding.severity, finding.kind) == ("fail", "ranks_in_error")
    assert "0         1         3         1         3         3   RUNNING  INCOMPLETE" in finding.evidence


def test_nothing_listening_is_one_line_and_no_finding():
    port = free_port()
    view = query_ras(f"127.0.0.1:{port}", Deadline(2))
    assert not view.answered and view.error.startswith("connection refused: no NCCL process with RAS")
    assert ras_findings(view) == []


def test_a_server_that_is_not_ras_is_said_so(ras_server):
    view = query_ras(ras_server("", hello="HTTP/1.1 400 Bad Request").address, Deadline(2))
    assert not view.answered and view.error == "not NCCL's RAS: it answered 'HTTP/1.1 400 Bad Request'"


def test_a_server_that_never_answers_is_bounded_by_the_deadline():
    with socket.create_server(("127.0.0.1", 0)) as silent:   # accepts (backlog), never speaks
        view = query_ras(f"127.0.0.1:{silent.getsockname()[1]}", Deadline(0.5))
    assert not view.answered and view.error == "no answer in time"
