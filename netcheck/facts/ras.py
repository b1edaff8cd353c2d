"""NCCL's RAS on this node: the communicators, their missing ranks, init state and errors.

NCCL >= 2.24 listens on NCCL_RAS_ADDR (default localhost:28028) in every process of a job
and speaks a line protocol (NVIDIA/nccl src/ras/client_support.cc, the `ncclras` client):
`CLIENT PROTOCOL 2` is answered `SERVER PROTOCOL 2`; `SET FORMAT json` (NCCL >= 2.28.7)
is answered `OK` or `ERROR: ...`; `STATUS` is answered with the report, after which the
server closes the connection (there is no end marker: read to EOF).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping

from netcheck.core.deadline import Deadline
from netcheck.core.jobrecords import RasComm, RasRank, RasView
from netcheck.facts.probe import error_text

DEFAULT_ADDRESS = "localhost:28028"
PROTOCOL = 2
MAX_REPLY_BYTES = 4 << 20        # a STATUS of thousands of ranks fits; more is cut
INIT_IN_PROGRESS = 7             # ncclInProgress: init_state / async_error still pending


def ras_address(env: Mapping[str, str]) -> str:
    return env.get("NCCL_RAS_ADDR") or DEFAULT_ADDRESS


def query_ras(address: str, deadline: Deadline) -> RasView:
    """One STATUS from NCCL's RAS at `address`, JSON where NCCL can, else its text."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=max(0.1, deadline.remaining())) as s:
            reader = _Lines(s, deadline)
            s.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
            hello = reader.line()
            if not hello.startswith("SERVER PROTOCOL"):
                return RasView(address, False, f"not NCCL's RAS: it answered {hello[:80]!r}")
            s.sendall(b"SET FORMAT json\n")
            as_json = reader.line() == "OK"   # older NCCL: "ERROR: Unknown command": text then
            s.sendall(b"STATUS\n")
            reply = reader.rest()
    except (OSError, ValueError) as e:
        return RasView(address, False, _why(e))
    if not as_json:
        return RasView(address, True, "", text=reply.decode(errors="replace"))
    try:
        return _from_json(address, json.loads(reply))
    except (ValueError, KeyError, TypeError) as e:
        return RasView(address, True, f"a STATUS netcheck could not read: {type(e).__name__}: {e}",
                       text=reply.decode(errors="replace"))


def _why(error: BaseException) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused: no NCCL process with RAS on this node (not a GPU node of the job, " \
               "NCCL older than 2.24, or NCCL_RAS_ENABLE=0)"
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "no answer in time"
    return f"{type(error).__name__}: {error_text(error)}"


class _Lines:
    """Replies read within the deadline and the size bound."""

    def __init__(self, sock: socket.socket, deadline: Deadline):
        self.sock, self.deadline, self.buffer = sock, deadline, b""

    def _more(self) -> bool:
        if self.deadline.expired() or len(self.buffer) > MAX_REPLY_BYTES:
            return False
        self.sock.settimeout(max(0.05, self.deadline.remaining()))
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def line(self) -> str:
        while b"\n" not in self.buffer:
            if not self._more():
                raise TimeoutError("no complete reply line") if self.deadline.expired() else \
                    ConnectionError("closed before a reply line")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode(errors="replace").rstrip("\r")

    def rest(self) -> bytes:
        while self._more():
            pass
        return self.buffer[:MAX_REPLY_BYTES]


def _from_json(address: str, doc: dict) -> RasView:
    comms = []
    for c in doc.get("communicators", []):
        ranks = [RasRank(int(r["rank"]), str(r.get("host", "unknown")), int(r.get("pid", -1)), _state(r["status"]))
                 for r in c.get("ranks", [])]
        ranks += [RasRank(int(r["rank"]), str(r.get("host", "unknown")), int(r.get("pid", -1)),
                          "dead" if r.get("status", {}).get("considered_dead") else "missing")
                  for r in c.get("missing_ranks", [])]
        comms.append(RasComm(str(c.get("hash", "?")), int(c.get("size", len(ranks))), tuple(sorted(ranks))))
    return RasView(address, True, "", str(doc.get("nccl_version", "")), tuple(comms))


def _state(status: dict) -> str:
    if status.get("abort_flag") or status.get("async_error", 0) not in (0, INIT_IN_PROGRESS):
        return "error"
    if status.get("init_state", 0) == INIT_IN_PROGRESS:
        return "init"
    return "ok"
