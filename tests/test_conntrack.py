"""facts/conntrack.py: a namespace's connection-tracking table read from a /proc tree: its count,
the machine's limit, and the drop counters summed over the CPUs' rows (hex), as 6.18 writes them."""

from __future__ import annotations

from pathlib import Path

from netcheck.core.model import ConntrackTable
from netcheck.facts.conntrack import read_conntrack


def test_the_reader_takes_the_namespaces_count_the_limit_and_the_cpus_counters(tmp_path: Path):
    netfilter = tmp_path / "sys/net/netfilter"
    netfilter.mkdir(parents=True)
    (netfilter / "nf_conntrack_count").write_text("262144\n")
    (netfilter / "nf_conntrack_max").write_text("262144\n")
    stat = tmp_path / "net/stat"
    stat.mkdir(parents=True)
    header = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop"
    rows = ["00040000  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00021e30 00000001 00000006 "
            "00000002", "00040000  00000000 00000000 00000000 00000000 00000000 00000000 00000000 0001e1d0 00000000 "
            "0000000a 00000000"]
    (stat / "nf_conntrack").write_text("\n".join([header, *rows]) + "\n")
    assert read_conntrack(str(tmp_path)) == ConntrackTable(262144, 262144, 16, 2, 1)
    (stat / "nf_conntrack").unlink()
    assert read_conntrack(str(tmp_path)) == ConntrackTable(262144, 262144)
    (netfilter / "nf_conntrack_count").unlink()
    assert read_conntrack(str(tmp_path)) is None, "no module: nothing tracked"
