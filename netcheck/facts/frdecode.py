"""Flight-recorder dumps decoded in child processes with limits: the fast path for a folder
of a thousand ranks' dumps, each thousands of entries long.

netcheck's own bounded decoder (facts.pickled) walks every opcode in Python: about 0.3 s for
a 2,000-entry dump, five minutes for a thousand ranks. Here each child runs the C unpickler,
which is about thirty times faster, with every global refused (so nothing in a dump can run
code: no class, no function, no extension code, no persistent id) under an address-space
limit, while this process bounds the time each file may take. What C pickle cannot bound
(a memo index that allocates gigabytes, nesting that overflows the C stack, keys built to
collide) then ends in a MemoryError, in the child's death or in its time running out: the
file is refused by name and a fresh child goes on with the rest.

    python -m netcheck.facts.frdecode      (reads "RANK<TAB>PATH" lines, writes one JSON line each)
"""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, NoReturn

from netcheck.core import codec
from netcheck.core.deadline import Deadline
from netcheck.core.errors import NetcheckError
from netcheck.core.hangrecords import RankTrace, Refused
from netcheck.facts.frformat import MAX_TRACE_BYTES, NotADump, trace_of

CHILD_MEMORY = 1 << 30        # a child's address space, beyond what Python itself maps at start
FILE_SECONDS = 10.0           # one dump may take this long to decode
MAX_CHILDREN = 4
MAX_LINE = 1 << 20            # a child's answer for one file (a rank's tails: a few KB)


class CodeInPickle(NetcheckError, pickle.UnpicklingError):
    """The dump names a global, a persistent id or an extension: it asks for code."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise CodeInPickle(f"it names the global {module[:80]}.{name[:80]}")

    def persistent_load(self, pid: object) -> NoReturn:
        raise CodeInPickle("a persistent id (an object only the writer's program holds)")


def dump_of(f: io.BufferedReader) -> object:
    """A dump file's data: JSON, or a pickle through the C unpickler with every global
    refused (run only inside a limited child). Reading the file object itself is the
    unpickler's fast path (three times faster than from bytes)."""
    first = f.peek(1)[:1]
    if first == b"{":
        try:
            return json.loads(f.read(MAX_TRACE_BYTES + 1).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise NotADump(f"not a JSON dump: the text does not parse (truncated?): {str(e)[:100]}") from None
    if first != b"\x80":
        raise NotADump("neither a pickle nor JSON")
    return _PlainUnpickler(f).load()


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    stdin: IO[bytes]             # the files it is given, one a line
    stdout: io.BufferedReader    # its answers, one a line
    busy: tuple[int, str] | None = None   # (rank, file) it decodes now
    since: float = 0.0


def decode_files(files: list[tuple[int, str]], deadline: Deadline) -> list[RankTrace | Refused]:
    """Each (rank, path), decoded by up to MAX_CHILDREN children at once; a file whose child
    dies or runs out of time is refused by name, and the others go on."""
    pending = list(reversed(files))
    results: list[RankTrace | Refused] = []
    children: list[_Child] = []
    with selectors.DefaultSelector() as sel:
        try:
            while (pending or any(c.busy for c in children)) and not deadline.expired():
                while pending and len([c for c in children if c.proc.poll() is None]) < min(MAX_CHILDREN, len(files)):
                    child = _spawn()
                    children.append(child)
                    sel.register(child.stdout, selectors.EVENT_READ, child)
                for child in children:
                    if child.busy is None and pending and child.proc.poll() is None:
                        _give(child, pending.pop())
                for key, _ in sel.select(min(0.2, deadline.remaining())):
                    _answered(key.data, sel, results)
                _reap_stuck(children, sel, results)
        finally:
            for child in children:
                child.proc.kill()
                child.proc.wait()
    left = [f for c in children if c.busy for f in [c.busy]] + pending
    results += [Refused(os.path.basename(p), "not decoded before --timeout", False) for _, p in left]
    return results


def _spawn() -> _Child:
    proc = subprocess.Popen([sys.executable, "-m", "netcheck.facts.frdecode"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # Both pipes asked for, buffered (Popen's bufsize -1): stdout is a BufferedReader.
    assert proc.stdin is not None and isinstance(proc.stdout, io.BufferedReader), "Popen without its pipes"
    return _Child(proc, proc.stdin, proc.stdout)


def _give(child: _Child, job: tuple[int, str]) -> None:
    child.busy, child.since = job, time.monotonic()
    try:
        child.stdin.write(f"{job[0]}\t{job[1]}\n".encode())
        child.stdin.flush()
    except OSError:
        pass  # it died: _reap_stuck names the file


def _answered(child: _Child, sel: selectors.BaseSelector, results: list[RankTrace | Refused]) -> None:
    line = child.stdout.readline(MAX_LINE)
    if not line:   # it died mid-file: the file killed it
        _refuse_busy(child, sel, results, f"its decoder died ({_death(child.proc)}): a pickle built to exhaust "
                     "its reader")
        return
    assert child.busy is not None, "a child answers only for the file it was given (_give)"
    results.append(_result(line, child.busy))
    child.busy = None


def _reap_stuck(children: list[_Child], sel: selectors.BaseSelector, results: list[RankTrace | Refused]) -> None:
    for child in children:
        if child.busy and time.monotonic() - child.since > FILE_SECONDS:
            child.proc.kill()
            _refuse_busy(child, sel, results, f"took over {FILE_SECONDS:g} s to decode: a pickle built to "
                         "exhaust its reader")
        elif child.busy and child.proc.poll() is not None and not child.stdout.peek(1):
            _refuse_busy(child, sel, results, f"its decoder died ({_death(child.proc)})")


def _refuse_busy(child: _Child, sel: selectors.BaseSelector, results: list[RankTrace | Refused], why: str) -> None:
    if child.busy is not None:
        results.append(Refused(os.path.basename(child.busy[1]), why, False))
        child.busy = None
    try:
        sel.unregister(child.stdout)
    except (KeyError, ValueError):
        pass
    child.proc.kill()


def _death(proc: subprocess.Popen[bytes]) -> str:
    code = proc.wait()
    return f"signal {-code}" if code < 0 else f"exit {code}"


def _result(line: bytes, job: tuple[int, str]) -> RankTrace | Refused:
    try:
        answer = json.loads(line)
        if "refused" in answer:
            return Refused(os.path.basename(job[1]), str(answer["refused"])[:500], bool(answer.get("hostile")))
        return codec.loads(RankTrace, json.dumps(answer["trace"]), MAX_LINE)
    except (ValueError, KeyError, TypeError, codec.DecodeError):
        return Refused(os.path.basename(job[1]), "its decoder answered nonsense", False)


def _serve() -> None:
    """The child: decode each file named on stdin, answer on stdout, never trust the file."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(hard, _mapped() + CHILD_MEMORY) if hard != resource.RLIM_INFINITY
                                            else _mapped() + CHILD_MEMORY, hard))
    sys.setrecursionlimit(10_000)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        rank, _, path = line.decode().rstrip("\n").partition("\t")
        try:
            with open(path, "rb") as f:
                trace = trace_of(int(rank), os.path.basename(path), dump_of(f))
            answer = {"trace": json.loads(codec.dumps(trace))}
        except CodeInPickle as e:
            answer = {"refused": f"a pickle that asks for code, never run: {e}", "hostile": True}
        except (NotADump, pickle.UnpicklingError, ValueError, EOFError, MemoryError, RecursionError,
                OverflowError, TypeError, KeyError, IndexError, AttributeError, OSError) as e:
            answer = {"refused": f"not a dump: {type(e).__name__}: {str(e)[:200]}"}
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


def _mapped() -> int:
    """This process's address space now (VmSize)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    _serve()
