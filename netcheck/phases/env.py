"""Phase 6, env: versions and settings from every node, compared on the host."""

from __future__ import annotations

import dataclasses
import os

from netcheck.cluster import rendezvous
from netcheck.cluster.collect import collect
from netcheck.core.constants import ENV_PHASE_LIMIT
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import HOST
from netcheck.core.storekeys import ENV
from netcheck.facts.envinfo import gather_env
from netcheck.phases.state import Run, seated_rank
from netcheck.rules import env as env_rules
from netcheck.rules.flightrec import flight_recorder_findings
from netcheck.rules.gpubuild import build_findings
from netcheck.rules.rdma import ib_recommendation, rdma_findings


def compare_env(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> None:
    """Versions and settings from every node, compared on the host."""
    ex, ranks = seat.exchange, sorted(names)
    mine = gather_env(run.config.hash_paths, os.environ)
    ex.post(ENV, seated_rank(seat), mine)
    if run.role != HOST:
        run.members = tuple(dataclasses.replace(m, env=mine) for m in run.members)
        return
    judge_env(run, collect(ex, ENV, ranks, run.phase_deadline(ENV_PHASE_LIMIT)), names)


def judge_env(run: Run, envs: dict[int, EnvFacts], names: dict[int, str]) -> None:
    """The host's env rules over every node's env facts (envs, by rank); a node in names whose
    facts never came is lost in the env phase."""
    run.members = tuple(dataclasses.replace(m, env=envs.get(m.rank)) for m in run.members)
    run.findings += (env_rules.env_findings(envs, names) + env_rules.hash_findings(envs, names)
                     + env_rules.shm_findings(envs, names) + build_findings(envs, names)
                     + flight_recorder_findings(envs, names) + rdma_findings(run.members))
    run.recommendation = ib_recommendation(run.members, run.recommendation)
    run.env_table = tuple(env_rules.env_differences(envs, names, run.config.verbose))
    lost = [r for r in sorted(names) if r not in envs]
    run.lose("env", names, lost)
