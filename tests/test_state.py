"""The run's state (phases.state.Run) records what happened and does no I/O: a joiner that
loses its host names it lost once, in the phase it happened, and hands the look at the path
to the host to the phases (Run.ask_host_path, phases.hostpath) at that moment, once."""

from __future__ import annotations

from netcheck.cli import build_parser, config_from_args
from netcheck.core.model import Finding
from netcheck.phases.state import Learnt, Run, fold_each
from netcheck.rules.registry import RDZV_JOIN


def joiner(asked: list[Run]) -> Run:
    config = config_from_args(build_parser().parse_args(["--rdzv", "node0:29500", "--nnodes", "2",
                                                         "--node-rank", "1"]), {})
    def ask(run: Run) -> tuple[bool, tuple[Finding, ...]]:
        asked.append(run)
        return False, ()
    return Run(config, lambda line: None, ask)


def lost(run: Run) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(f.check, f.kind, f.nodes) for f in run.findings if f.check == RDZV_JOIN]


def test_a_host_lost_in_a_phase_is_named_there_and_the_path_asked_once_at_that_moment():
    asked: list[Run] = []
    run = joiner(asked)
    with run.phase("mesh"):
        raise ConnectionResetError("the store's connection was reset")
    assert asked == [run] and run.host_lost
    assert lost(run) == [(RDZV_JOIN, "lost_in_mesh", (0,))]
    with run.phase("env"):   # the next phase finds it gone too: said once, asked once
        raise ConnectionResetError("the store's connection was reset")
    run.lose_host("bandwidth")
    assert asked == [run]
    assert lost(run) == [(RDZV_JOIN, "lost_in_mesh", (0,))]



def test_a_host_lost_behind_a_path_that_drops_full_size_frames_blames_the_path_not_the_host():
    config = config_from_args(build_parser().parse_args(["--rdzv", "node0:29500", "--nnodes", "2",
                                                         "--node-rank", "1"]), {})
    run = Run(config, lambda line: None, lambda run: (True, ()))   # the path was found to drop full frames
    run.lose_host("rendezvous", "Socket Timeout")
    (lost,) = [f for f in run.findings if f.check == RDZV_JOIN]
    assert lost.kind == "lost_in_rendezvous" and "drops full-size frames" in lost.summary
    assert "the path, not the node" in lost.fix


def test_what_a_phase_learnt_before_an_internal_error_stays_in_the_report():
    """A phase yields its measurements before its rules judge them: a rule that breaks leaves
    run.internal beside what came before it, not in place of it (issue 66)."""
    run = joiner([])
    measured = Finding(check="bw.busbw", severity="pass", nodes=(0, 1), summary="measured")

    def phase():
        yield Learnt((measured,))
        raise KeyError("a rule's bug")

    with run.phase("bandwidth"):
        fold_each(run, phase())
    assert [(f.check, f.severity) for f in run.findings] == [("bw.busbw", "pass"), ("run.internal", "fail")]
    assert run.unfinished == "bandwidth"
