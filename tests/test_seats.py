"""What a joiner reads of the seating (issue 38): its block of seats and the seated names in
hostlist-like runs, small at 10,000 regular names and exact for any names."""

from __future__ import annotations

import pytest

from netcheck.core import codec
from netcheck.core.codec import DecodeError
from netcheck.core.constants import MAX_MEMBERS, SEAT_BLOCK
from netcheck.core.fields import is_host
from netcheck.core.names import is_safe_hostname
from netcheck.core.seats import (
    NameRun,
    RankRun,
    RankRuns,
    Seated,
    compact,
    expand,
    rank_in,
    rank_runs,
    ranks_of,
    seat_blocks,
)


def test_the_most_members_with_regular_names_are_a_few_runs_and_come_back_exact():
    names = {0: "node0", **{r: f"sim{r:04d}" for r in range(1, MAX_MEMBERS) if r != 1428}}
    fqdns = {r: f"{h}.cluster" for r, h in names.items()}
    seated = Seated(compact(names), compact(fqdns), ())
    assert len(seated.hostnames) == 3   # node0, then sim0001.. around the missing rank
    assert len(codec.dumps(seated)) < 1024
    assert expand(seated.hostnames, is_safe_hostname) == names
    assert expand(seated.fqdns, is_host) == fqdns


def test_torchrun_workers_sharing_their_nodes_names_are_a_few_runs_and_come_back_exact():
    """1,024 nodes x 8 workers: each name held by 8 ranks in a row. As runs of one name each
    they were 1.3 MB, over what a joiner reads, and no joiner of such a job took its seat."""
    names = {r: "node0" if r < 8 else f"sim{r // 8:04d}" for r in range(8 * 1024) if r != 4097}
    fqdns = {r: f"{h}.cluster" for r, h in names.items()}
    seated = Seated(compact(names), compact(fqdns), ())
    # node0; sim0001-sim0511 and sim0512's first worker; its six after the missing one; sim0513 on
    assert len(seated.hostnames) == 5
    assert len(codec.dumps(seated)) < 2048
    assert expand(seated.hostnames, is_safe_hostname) == names
    assert expand(seated.fqdns, is_host) == fqdns
    alone = {0: "gpu", 1: "gpu", 2: "gpu", 3: "cpu"}
    assert compact(alone)[0] == NameRun(0, 3, "gpu", 0, 0, "", 3) and expand(compact(alone), is_host) == alone


def test_irregular_names_are_runs_of_one_and_come_back_exact():
    names = {1: "gpu-a1-003.dc2", 2: "gpu-a1-004.dc2", 3: "x", 4: "10.0.0.4", 6: "node9", 7: "node10",
             8: "node010", 9: "fe80::1%eth0"}
    runs = compact(names)
    assert runs[0] == NameRun(1, 2, "gpu-a1-", 3, 3, ".dc2")
    assert expand(runs, is_host) == names


@pytest.mark.parametrize("runs", [
    (NameRun(0, MAX_MEMBERS, "a", 0, 1, ""), NameRun(0, 1, "b", 0, 0, "")),   # more names than a cluster
    (NameRun(MAX_MEMBERS - 1, 2, "a", 0, 1, ""),),                            # ranks past the last
    (NameRun(0, 2, "a", 0, 0, ""),),                                        # one name, not held by both
    (NameRun(0, 3, "a", 0, 0, "", 2),),
    (NameRun(0, 1, "bad..", 1, 1, ""),),                                    # not a hostname
])
def test_runs_no_cluster_has_are_refused(runs):
    with pytest.raises(codec.DecodeError):
        expand(runs, is_safe_hostname)


def test_each_arrival_finds_its_rank_in_its_block_and_one_not_seated_none():
    ranks = {0: 0, 5: 3, SEAT_BLOCK + 2: 7}
    blocks = seat_blocks(ranks)
    assert sorted(blocks) == [0, 1]
    assert {a: rank_in(blocks[a // SEAT_BLOCK], a) for a in ranks} == ranks
    assert rank_in(blocks[0], 1) is None and rank_in(blocks[0], SEAT_BLOCK - 1) is None


def test_ranks_run_as_consecutive_ones_and_read_back():
    assert rank_runs((7, 1, 2, 3)) == RankRuns((RankRun(1, 3), RankRun(7, 1)))
    alive = tuple(r for r in range(1, MAX_MEMBERS) if r % 7)
    runs = rank_runs(alive)
    assert ranks_of(runs) == alive and len(runs.runs) == MAX_MEMBERS // 7 + 1
    assert len(codec.dumps(rank_runs(tuple(range(1, MAX_MEMBERS))))) < 100   # one run: a few bytes, not 59 KB


def test_rank_runs_past_the_largest_cluster_are_refused_as_undecodable():
    with pytest.raises(DecodeError, match="past"):
        ranks_of(RankRuns((RankRun(0, MAX_MEMBERS), RankRun(MAX_MEMBERS - 1, 2))))
    with pytest.raises(DecodeError, match="past"):
        ranks_of(RankRuns((RankRun(0, MAX_MEMBERS - 1), RankRun(0, 2))))
