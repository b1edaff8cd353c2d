"""Findings about the run itself (run.*): a phase skipped, out of time, without a usable
torch, or failed inside netcheck."""

from __future__ import annotations

from netcheck.core.model import FAIL, WARN, Finding
from netcheck.rules.registry import (
    RUN_INTERNAL, RUN_SKIPPED, RUN_TIMEOUT, RUN_TORCH, SKIPPED_GOODBYE, SKIPPED_PHASE,
)


SHORT_OF_TIME_FIX = "raise --timeout: waiting for the nodes above took the rest"


def skipped_finding(phase: str, why: str, fix: str = "fix the failures above, then run again") -> Finding:
    """A phase left out: an earlier failure makes it moot, or --timeout has run out."""
    return Finding(RUN_SKIPPED, WARN, (), f"the {phase} phase was skipped: {why}", (), fix, SKIPPED_PHASE)


def unheard_goodbyes(names: dict[int, str]) -> list[Finding]:
    """Goodbyes the host had no time left to wait for: not counted as lost nodes."""
    if not names:
        return []
    return [Finding(RUN_SKIPPED, WARN, (), f"--timeout was spent before {', '.join(names.values())} "
                    "said goodbye; not counted as lost", (), SHORT_OF_TIME_FIX, SKIPPED_GOODBYE)]


def timeout_finding(phase: str, seconds: float) -> Finding:
    return Finding(RUN_TIMEOUT, FAIL, (), f"the {phase} phase did not finish within --timeout "
                   f"({seconds:g} s)", (), "the findings above say what was missing; raise --timeout "
                   "only if the cluster is merely slow")


def torch_finding(phase: str, why: str, ranks: tuple[int, ...]) -> Finding:
    """The node's own torch is the problem: said as such, not as a netcheck bug or a peer's fault."""
    return Finding(RUN_TORCH, FAIL, ranks, f"the {phase} phase needs torch.distributed: {why}", (),
                   "install a working torch 2.1 or newer in this environment (pip install "
                   "'torch>=2.1'; the README's compatibility table lists the releases tested)")


def internal_finding(phase: str, error: BaseException) -> Finding:
    return Finding(RUN_INTERNAL, FAIL, (), f"netcheck could not run the {phase} phase: "
                   f"{type(error).__name__}: {error}", (), "this is a netcheck bug: please report it "
                   "with the JSON report")
