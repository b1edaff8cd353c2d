"""Phase 6, env: versions and settings from every node, compared on the host."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Generator

from netcheck.cluster import rendezvous
from netcheck.cluster.collect import collect
from netcheck.core.constants import ENV_PHASE_LIMIT
from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import HOST
from netcheck.core.storekeys import ENV
from netcheck.facts.envinfo import gather_env
from netcheck.phases.state import Learnt, Lost, Run, seated_rank
from netcheck.rules import env as env_rules
from netcheck.rules.rdma import ib_recommendation
from netcheck.rules.registry_judges import EnvRecords, judged


def compare_env(run: Run, seat: rendezvous.Seat, names: dict[int, str]) -> Generator[Learnt, None, None]:
    """Versions and settings from every node, compared on the host."""
    ex, ranks = seat.exchange, sorted(names)
    mine = gather_env(run.config.hash_paths, os.environ)
    ex.post(ENV, seated_rank(seat), mine)
    if run.role != HOST:
        yield Learnt(members=tuple(dataclasses.replace(m, env=mine) for m in run.members))
        return
    yield from judge_env(run, collect(ex, ENV, ranks, run.phase_deadline(ENV_PHASE_LIMIT)), names)


def judge_env(run: Run, envs: dict[int, EnvFacts], names: dict[int, str]) -> Generator[Learnt, None, None]:
    """The host's env rules over every node's env facts (envs, by rank); a node in names whose
    facts never came is lost in the env phase. The facts first: kept in the report whatever
    becomes of the rules."""
    members = tuple(dataclasses.replace(m, env=envs.get(m.rank)) for m in run.members)
    yield Learnt(members=members)
    yield Learnt(tuple(judged("env", EnvRecords(envs, names, members))),
                 recommendation=ib_recommendation(members, run.recommendation),
                 env_table=tuple(env_rules.env_differences(envs, names, run.config.verbose)),
                 lost=Lost("env", names, tuple(r for r in sorted(names) if r not in envs)))
