"""majority.split: one tie policy for every rule that names the odd nodes out."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from netcheck.rules.majority import split


@pytest.mark.parametrize("values, majority, odd", [
    ({0: "a", 1: "a", 2: "b"}, "a", (2,)),
    ({0: "b", 1: "a", 2: "a"}, "a", (0,)),
    ({0: "a", 1: "b"}, None, (0, 1)),                      # two nodes: either could be wrong
    ({0: "a", 1: "a", 2: "b", 3: "b"}, None, (0, 1, 2, 3)),  # a tie at the top names everyone
    ({0: "a", 1: "a", 2: "b", 3: "b", 4: "b"}, "b", (0, 1)),
    ({0: "a", 1: "b", 2: "c"}, None, (0, 1, 2)),
    ({0: "a", 1: "a", 2: "b", 3: "c"}, "a", (2, 3)),       # strictly more than any other value
    ({0: "a"}, "a", ()),
    ({}, None, ()),
])
def test_majority_and_the_odd_ones_out(values, majority, odd):
    s = split(values)
    assert (s.majority, s.odd) == (majority, odd)


def test_groups_are_largest_first_then_by_lowest_key():
    assert split({5: "x", 1: "y", 3: "x", 0: "z"}).groups == (("x", (3, 5)), ("z", (0,)), ("y", (1,)))


def test_the_verdict_does_not_depend_on_hashing():
    """String hashing is randomised per process: the same input must split the same way
    under any PYTHONHASHSEED (the old rules took max() over a set of tuples)."""
    code = ("from netcheck.rules.majority import split; "
            "s = split({0: ('ib', 'hdr'), 1: ('ib',), 2: ('eth',), 3: ('ib',), 4: ('ib', 'hdr')}); "
            "print(s.majority, s.odd, s.groups)")
    seen = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)},
                           capture_output=True, text=True, check=True).stdout for seed in range(6)}
    assert len(seen) == 1, seen
