"""The env comparison and severity rules, over recorded facts."""

from __future__ import annotations

import pytest

from netcheck.core.envfacts import EnvFacts
from netcheck.core.model import FAIL, PASS, WARN, verdict_of
from netcheck.rules.env import (
    FIXES,
    INFO,
    SAME,
    SEVERITY,
    compare,
    env_differences,
    env_findings,
    fix_for,
    hash_findings,
    severity_of,
    shm_findings,
    shm_thresholds,
    version_change,
    version_key,
)
from netcheck.rules.flightrec import flight_recorder_findings

MiB, GiB = 1 << 20, 1 << 30
HASH_A = "sha256 " + "a" * 64 + " (3 files, 1 KiB)"
HASH_B = "sha256 " + "b" * 64 + " (3 files, 1 KiB)"
BASE = {
    "torch.version": "2.14.1+cu124", "torch.git_version": "abc123", "nccl.loaded": "2.21.5",
    "nccl.compiled": "2.21.5", "cuda.runtime": "12.4", "driver.version": "550.54.15",
    "python.version": "3.11.7", "python.executable": "/venv/bin/python", "pkg.numpy": "2.4.6",
    "pkg.deepspeed": "absent", "gpu.count": "8", "gpu.0.name": "NVIDIA H100 80GB HBM3",
    "cpu.model": "AMD EPYC 9654", "shm.bytes": str(64 * GiB), "hash./code": HASH_A,
    "var.MASTER_PORT": "29500",
}


def cluster(n: int, **changes: dict[int, str]) -> dict[int, EnvFacts]:
    """n nodes with BASE facts; changes: key (dots as "__") -> {rank: value or None to drop}."""
    facts = {}
    for rank in range(n):
        values = dict(BASE)
        for key, per_rank in changes.items():
            key = key.replace("__", ".")
            if rank in per_rank:
                if per_rank[rank] is None:
                    values.pop(key, None)
                else:
                    values[key] = per_rank[rank]
        facts[rank] = EnvFacts(values)
    return facts


NAMES = {r: f"node{r}" for r in range(16)}


def flagged(facts):
    return [f for f in env_findings(facts, NAMES) if f.severity != PASS]


def test_identical_nodes_pass():
    [finding] = env_findings(cluster(4), NAMES)
    assert finding.severity == PASS and finding.nodes == (0, 1, 2, 3)


def test_one_node_has_nothing_to_compare():
    [finding] = env_findings(cluster(1), NAMES)
    assert (finding.severity, finding.nodes, finding.evidence) == (PASS, (0,), ())


def test_one_odd_node_out_fails_naming_it_and_the_majority():
    [finding] = flagged(cluster(8, torch__version={3: "2.13.0+cu124"}))
    assert finding.severity == FAIL and finding.nodes == (3,)
    assert finding.evidence == ("torch.version: 2.13.0+cu124 on node3",
                                "torch.version: 2.14.1+cu124 on the other 7")
    assert "2.14.1+cu124 on most nodes" in finding.fix


def test_nccl_ib_disable_on_one_node_only_warns_naming_that_node():
    [finding] = flagged(cluster(8, var__NCCL_IB_DISABLE={5: "1"}))
    assert finding.severity == WARN and finding.nodes == (5,)
    assert finding.evidence == ("var.NCCL_IB_DISABLE: 1 on node5",
                                "var.NCCL_IB_DISABLE: unset on the other 7")
    assert "NCCL_IB_DISABLE" in finding.fix
    [other] = flagged(cluster(3, var__NCCL_IB_DISABLE={0: "0", 1: "1", 2: "0"}))
    assert other.evidence == ("var.NCCL_IB_DISABLE: 1 on node1", "var.NCCL_IB_DISABLE: 0 on the other 2")


def test_a_package_present_on_one_node_only_is_named():
    [finding] = flagged(cluster(8, pkg__deepspeed={2: "0.14.0"}))
    assert finding.severity == WARN and finding.nodes == (2,)
    assert finding.evidence == ("pkg.deepspeed: 0.14.0 on node2", "pkg.deepspeed: absent on the other 7")
    [missing] = flagged(cluster(4, pkg__numpy={1: "absent"}))
    assert (missing.nodes, missing.evidence) == ((1,), ("pkg.numpy: absent on node1",
                                                        "pkg.numpy: 2.4.6 on the other 3"))
    # an nvidia-* package recorded only where installed: the others lack the key
    [nvidia] = flagged(cluster(3, **{"pkg.nvidia-cublas-cu12": {0: "12.4.5.8"}}))
    assert (nvidia.nodes, nvidia.evidence) == ((0,), ("pkg.nvidia-cublas-cu12: 12.4.5.8 on node0",
                                                      "pkg.nvidia-cublas-cu12: absent on the other 2"))


def test_a_differing_hash_fails_and_an_incomplete_one_warns():
    [finding] = flagged(cluster(4, **{"hash./code": {2: HASH_B}}))
    assert finding.severity == FAIL and finding.nodes == (2,)
    assert f"hash./code: {HASH_B} on node2" in finding.evidence   # full value in the evidence
    assert "/code" in finding.fix
    stopped = "incomplete: over 10 s after 812 files (3 GiB read)"
    [bounded] = flagged(cluster(4, **{"hash./code": {2: stopped}}))
    assert bounded.severity == WARN


def test_a_hash_path_no_node_can_read_is_no_agreement_and_one_node_short_of_it_is_named():
    """--hash /shared/tyop on every node (issue 49 item 8): all fail to read it the same way,
    which env.mismatch passed as agreement; one node without the mount is named, not the
    majority that read it."""
    missing = "unreadable: FileNotFoundError: [Errno 2] No such file or directory: '/code'"
    everyone = cluster(3, **{"hash./code": {r: missing for r in range(3)}})
    assert not flagged(everyone)
    (found,) = hash_findings(everyone, NAMES)
    assert (found.severity, found.kind, found.nodes) == (FAIL, "hash_unreadable", (0, 1, 2))
    assert "--hash /code" in found.summary and "FileNotFoundError" in found.evidence[0]
    one = cluster(4, **{"hash./code": {3: missing}})
    assert not flagged(one)   # named once, as unreadable, not as another content
    (found,) = hash_findings(one, NAMES)
    assert found.nodes == (3,) and "the other nodes read it" in found.summary
    assert hash_findings(cluster(4), NAMES) == []


def test_every_node_differs():
    facts = cluster(3, torch__version={0: "2.11.0", 1: "2.12.0", 2: "2.13.0"})
    [finding] = flagged(facts)
    assert finding.severity == FAIL and finding.nodes == (0, 1, 2)
    assert finding.evidence == ("torch.version: 2.11.0 on node0", "torch.version: 2.12.0 on node1",
                                "torch.version: 2.13.0 on node2")


def test_an_even_split_has_no_majority():
    [finding] = flagged(cluster(4, driver__version={0: "535.129.03", 1: "535.129.03"}))
    assert finding.severity == WARN and finding.nodes == (0, 1, 2, 3)
    assert finding.evidence == ("driver.version: 535.129.03 on node0, node1",
                                "driver.version: 550.54.15 on node2, node3")
    assert "pick one" in finding.fix


def test_several_odd_values_are_each_named():
    facts = cluster(6, python__version={1: "3.10.14", 4: "3.12.3", 5: "3.12.3"})
    [finding] = flagged(facts)
    assert finding.nodes == (1, 4, 5)
    assert finding.evidence == ("python.version: 3.12.3 on node4, node5", "python.version: 3.10.14 on node1",
                                "python.version: 3.11.7 on the other 3")


def test_keys_that_differ_on_the_same_nodes_make_one_finding():
    facts = cluster(8, torch__version={6: "2.13.0+cu124"}, torch__git_version={6: "def456"},
                    nccl__loaded={6: "2.20.5"}, var__NCCL_DEBUG={1: "INFO"})
    fail, warn = sorted(flagged(facts), key=lambda f: f.severity)
    assert fail.severity == FAIL and fail.nodes == (6,)
    assert len(fail.evidence) == 6
    assert warn.severity == WARN and warn.nodes == (1,)


def test_info_keys_are_shown_not_flagged():
    facts = cluster(4, var__NCCL_SOCKET_IFNAME={0: "eth0", 1: "ens5", 2: "ib0", 3: "eno1"},
                    var__CUDA_VISIBLE_DEVICES={2: "0,1"}, var__MASTER_ADDR={0: "localhost"},
                    gpu__0__uuid={r: f"GPU-{r}" for r in range(4)}, cpu__model={3: "Intel Xeon"},
                    python__executable={1: "/scratch/venv/bin/python"})
    [finding] = env_findings(facts, NAMES)
    assert finding.severity == PASS
    rows = env_differences(facts, NAMES)
    assert {r.severity for r in rows} == {INFO}
    assert [(r.value, r.nodes) for r in rows if r.key == "gpu.0.uuid"] == \
        [("(differs per node)", "all 4")]
    assert [(r.value, r.nodes) for r in rows if r.key == "cpu.model"] == \
        [("Intel Xeon", "node3"), ("AMD EPYC 9654", "the other 3")]


def test_the_table_shows_differences_and_verbose_every_key():
    facts = cluster(4, var__NCCL_IB_DISABLE={1: "1"})
    rows = env_differences(facts, NAMES)
    assert [(r.key, r.value, r.nodes, r.severity) for r in rows] == [
        ("var.NCCL_IB_DISABLE", "1", "node1", WARN),
        ("var.NCCL_IB_DISABLE", "unset", "the other 3", WARN)]
    every = env_differences(facts, NAMES, verbose=True)
    assert {r.key for r in every} == set(BASE) | {"var.NCCL_IB_DISABLE"}
    torch_row = next(r for r in every if r.key == "torch.version")
    assert (torch_row.nodes, torch_row.severity, torch_row.ranks) == ("all 4", SAME, (0, 1, 2, 3))
    assert every[:2] == rows                                   # differences first


def test_a_key_one_node_did_not_record():
    [finding] = flagged(cluster(3, cudnn__version={0: "9.1.0", 1: "9.1.0", 2: None}))
    assert (finding.nodes, finding.evidence) == ((2,), ("cudnn.version: not recorded on node2",
                                                         "cudnn.version: 9.1.0 on the other 2"))


# ---------------------------------------------------------------------------- versions

def test_versions_compare_by_release_and_build():
    assert version_key("2.13.0+cu121") == ((2, 13), "", "cu121")
    assert version_change("535.129.03", "535.129.3") is None
    assert version_change("12.4", "12.4.0") is None
    assert version_change("2.13.0+cpu", "2.13.0+cu121") == "build"
    assert version_change("2.13.0", "2.14.1") == "release"
    assert version_change("3.0.0rc1", "3.0.0") == "pre-release"
    assert version_change("not loaded", "2.21.5") == "value"
    assert version_change("absent", "absent") is None


def test_equal_versions_spelled_differently_agree_and_builds_do_not():
    assert flagged(cluster(3, driver__version={1: "550.54.015"})) == []
    [finding] = flagged(cluster(3, torch__version={2: "2.14.1+cpu"}))
    assert (finding.severity, finding.nodes) == (FAIL, (2,))
    assert finding.evidence == ("torch.version: 2.14.1+cpu on node2", "torch.version: 2.14.1+cu124 on the other 2")


# ---------------------------------------------------------------------------- the table

@pytest.mark.parametrize("key, severity", [
    ("torch.version", FAIL), ("torch.git_version", FAIL), ("torch.cuda_build", FAIL),
    ("nccl.compiled", FAIL), ("nccl.loaded", FAIL), ("cuda.runtime", FAIL), ("hash./code", FAIL),
    ("pkg.torch", FAIL), ("pkg.nvidia-nccl-cu12", FAIL),
    ("driver.version", WARN), ("python.version", WARN), ("cudnn.version", WARN),
    ("var.NCCL_IB_DISABLE", WARN), ("var.TORCH_NCCL_ASYNC_ERROR_HANDLING", WARN),
    ("file./etc/nccl.conf", WARN), ("file.~/.nccl.conf", WARN), ("var.MASTER_PORT", WARN),
    ("pkg.numpy", WARN), ("gpu.count", WARN), ("gpu.3.name", WARN), ("something.new", WARN),
    ("var.NCCL_SOCKET_IFNAME", INFO), ("var.GLOO_SOCKET_IFNAME", INFO), ("var.NCCL_HOSTID", INFO),
    ("var.TP_SOCKET_IFNAME", INFO), ("var.CUDA_VISIBLE_DEVICES", INFO), ("var.MASTER_ADDR", INFO),
    ("python.executable", INFO), ("gpu.7.uuid", INFO), ("cpu.model", INFO), ("cpu.count", INFO),
    ("os.kernel", INFO), ("var.SLURMD_NODENAME_HOSTNAME", INFO), ("nccl.library", INFO),
])
def test_severity_table(key, severity):
    assert severity_of(key) == severity


def test_the_tables_are_well_formed():
    assert set(SEVERITY.values()) == {FAIL, WARN, INFO}
    assert list(SEVERITY)[-1] == "*" and list(FIXES)[-1] == "*"
    for key in ("torch.version", "hash./code", "var.NCCL_IB_DISABLE", "pkg.numpy", "x.y"):
        splits = compare(cluster(3, **{key: {0: "9"}}))
        [split] = [s for s in splits if s.key == key]
        assert fix_for(split)                                   # every template formats


# ---------------------------------------------------------------------------- host.shm

def shm(gpus: str, size: str) -> dict[int, EnvFacts]:
    return cluster(2, gpu__count={1: gpus}, shm__bytes={1: size})


def test_shm_thresholds():
    assert shm_thresholds(8) == (256 * MiB, 1 * GiB)
    assert shm_thresholds(16) == (512 * MiB, 2 * GiB)
    assert shm_thresholds(1) == (32 * MiB, 1 * GiB)


def test_docker_default_shm_fails_for_eight_gpus():
    [finding] = shm_findings(shm("8", str(64 * MiB)), NAMES)
    assert finding.severity == FAIL and finding.nodes == (1,)
    assert finding.evidence == ("node1: /dev/shm 64 MiB, 8 GPUs: fails below 256 MiB, 1 GiB recommended",)
    assert "--shm-size" in finding.fix


@pytest.mark.parametrize("gpus, size, severity", [
    ("8", str(512 * MiB), WARN), ("8", str(GiB), PASS), ("2", str(64 * MiB), WARN),
    ("4", str(64 * MiB), FAIL), ("no CUDA", str(64 * MiB), PASS), ("8", "unreadable: x", WARN),
])
def test_shm_severity(gpus, size, severity):
    assert verdict_of(shm_findings(shm(gpus, size), NAMES)) == severity


def test_several_small_nodes_make_one_finding():
    facts = cluster(3, shm__bytes={0: str(64 * MiB), 2: str(64 * MiB)})
    [finding] = shm_findings(facts, NAMES)
    assert finding.nodes == (0, 2)
    assert [e.split(":")[0] for e in finding.evidence] == ["node0", "node2"]
    assert "--shm-size=1g" in finding.fix
    [big] = shm_findings(cluster(2, gpu__count={0: "16"}, shm__bytes={0: str(GiB)}), NAMES)
    assert big.severity == WARN and "--shm-size=2g" in big.fix
    facts = cluster(3, shm__bytes={0: str(512 * MiB), 2: "unreadable: PermissionError: x"})
    [mixed] = shm_findings(facts, NAMES)
    assert (mixed.severity, mixed.nodes) == (WARN, (0, 2))
    assert mixed.evidence[1] == "node2: /dev/shm unreadable: PermissionError: x"


def test_processes_of_one_host_are_named_once():
    per_host = {r: f"gpu0{r // 4}" for r in range(8)}  # torchrun: 4 ranks on each of 2 hosts
    facts = cluster(8, torch__version={r: "2.13.0+cu124" for r in range(4)})
    [finding] = [f for f in env_findings(facts, per_host) if f.severity != PASS]
    # Two hosts, one version each: said of the nodes, not of their 4 ranks each.
    assert finding.evidence == ("torch.version: 2.13.0+cu124 on gpu00", "torch.version: 2.14.1+cu124 on gpu01")


TORCHRUN = {r: f"node{r // 2}" for r in range(6)}   # 3 hosts x 2 ranks


def test_under_torchrun_counts_are_of_nodes_not_ranks():
    [agree] = env_findings(cluster(6), TORCHRUN)
    assert (agree.severity, agree.nodes) == (PASS, tuple(range(6)))
    [one] = env_findings(cluster(2), {0: "vm", 1: "vm"})
    assert (one.severity, one.nodes) == (PASS, (0, 1))
    facts = cluster(6, var__NCCL_IB_DISABLE={4: "1", 5: "1"})
    [odd] = [f for f in env_findings(facts, TORCHRUN) if f.severity != PASS]
    assert odd.evidence == ("var.NCCL_IB_DISABLE: 1 on node2", "var.NCCL_IB_DISABLE: unset on the other 2")
    assert odd.nodes == (4, 5)
    rows = env_differences(facts, TORCHRUN)
    assert [r.nodes for r in rows if r.key == "var.NCCL_IB_DISABLE"] == ["node2", "the other 2"]


def test_shm_says_a_node_without_gpus_needs_no_shared_memory_and_folds_its_ranks():
    [none] = shm_findings(cluster(4, gpu__count={r: "0" for r in range(4)}), TORCHRUN)
    assert none.severity == PASS
    assert none.evidence == ("node0 (ranks 0, 1): no GPUs, NCCL's shared memory is not needed",
                             "node1 (ranks 2, 3): no GPUs, NCCL's shared memory is not needed")
    [lone] = shm_findings(cluster(1, gpu__count={0: "0"}), {0: "vm"})
    assert (lone.severity, lone.evidence) == (PASS, ("vm: no GPUs, NCCL's shared memory is not needed",))
    [mixed] = shm_findings(cluster(3, gpu__count={2: "0"}), NAMES)
    assert (mixed.severity, mixed.nodes) == (PASS, (0, 1, 2))
    assert mixed.evidence[2] == "node2: no GPUs, NCCL's shared memory is not needed"
    [full] = shm_findings(cluster(2), NAMES)
    assert (full.severity, full.nodes) == (PASS, (0, 1))
    assert [e.split(":")[0] for e in full.evidence] == ["node0", "node1"]


def test_shm_too_small_on_one_host_of_torchrun_names_it_once():
    facts = cluster(4, shm__bytes={2: str(64 * MiB), 3: str(64 * MiB)})
    [small] = shm_findings(facts, TORCHRUN)
    assert small.nodes == (2, 3)
    assert small.evidence == ("node1 (ranks 2, 3): /dev/shm 64 MiB, 8 GPUs: fails below 256 MiB, 1 GiB recommended",)


# ---------------------------------------------------------------------------- env.flight_recorder

def recorded(findings):
    return [(f.check, f.severity, f.kind, f.nodes) for f in findings]


def test_torch_213s_defaults_make_a_hang_diagnosable():
    (f,) = flight_recorder_findings(cluster(3), {0: "node0", 1: "node1", 2: "node2"})
    assert recorded([f]) == [("env.flight_recorder", "pass", "", (0, 1, 2))]


def test_a_recorder_set_to_zero_warns_per_node_with_the_export_line():
    facts = cluster(3, var__TORCH_FR_BUFFER_SIZE={1: "0", 2: "0"})
    (f,) = flight_recorder_findings(facts, {0: "node0", 1: "node1", 2: "node2"})
    assert recorded([f]) == [("env.flight_recorder", "warn", "recorder_off", (1, 2))]
    assert f.evidence == ("node1: TORCH_FR_BUFFER_SIZE=0", "node2: TORCH_FR_BUFFER_SIZE=0")
    assert f.fix.startswith("export TORCH_FR_BUFFER_SIZE=2000 (")


def test_the_first_name_torch_reads_wins_and_the_older_one_gates_nccls_dump():
    # TORCH_FR_BUFFER_SIZE is read first: the older name's 0 does not turn the recorder off,
    # but NCCL's process group reads only the older name to decide whether to dump.
    facts = cluster(1, var__TORCH_FR_BUFFER_SIZE={0: "4000"}, var__TORCH_NCCL_TRACE_BUFFER_SIZE={0: "0"})
    (f,) = flight_recorder_findings(facts, {0: "node0"})
    assert recorded([f]) == [("env.flight_recorder", "warn", "no_dump_on_timeout", (0,))]
    assert f.fix.startswith("export TORCH_NCCL_TRACE_BUFFER_SIZE=2000")
    facts = cluster(1, var__TORCH_NCCL_TRACE_BUFFER_SIZE={0: "0"})
    (f,) = flight_recorder_findings(facts, {0: "node0"})
    assert (f.kind, f.evidence) == ("recorder_off", ("node0: TORCH_NCCL_TRACE_BUFFER_SIZE=0",))


@pytest.mark.parametrize("torch,kinds", [
    ("2.13.0+cpu", []),
    ("2.11.0", []),
    ("2.10.1+cu128", ["recorder_off"]),                       # the recorder defaulted to 0
    ("2.6.0", ["recorder_off", "no_dump_on_timeout"]),        # and nothing dumped on a timeout
    ("unreadable: No module named 'torch'", ["recorder_off", "no_dump_on_timeout"]),
])
def test_unset_variables_mean_the_defaults_of_the_nodes_torch(torch, kinds):
    (f, *more) = flight_recorder_findings(cluster(1, torch__version={0: torch}), {0: "node0"})
    assert [x.kind for x in (f, *more) if x.severity == "warn"] == kinds
    if kinds:
        assert "unset" in f.evidence[0] and "off unless set" in f.evidence[0]
    if torch == "2.6.0":
        assert f.fix.startswith("export TORCH_NCCL_TRACE_BUFFER_SIZE=2000")   # the only name torch 2.6 reads
        assert more[0].fix.startswith("export TORCH_NCCL_DUMP_ON_TIMEOUT=1")


def test_a_torch_before_the_flight_recorder_is_told_to_upgrade_not_to_set_what_it_never_reads():
    """torch 2.1 has no recorder and no dump on timeout, whatever is set, and reads only
    NCCL_ASYNC_ERROR_HANDLING (its TORCH_ name came with 2.2): make compat's torch 2.1.2."""
    facts = cluster(2, torch__version={0: "2.1.2+cu121", 1: "2.1.2+cu121"},
                    var__TORCH_NCCL_TRACE_BUFFER_SIZE={0: "2000"},
                    var__TORCH_NCCL_ASYNC_ERROR_HANDLING={0: "0"}, var__NCCL_ASYNC_ERROR_HANDLING={1: "0"})
    off, abort = flight_recorder_findings(facts, {0: "node0", 1: "node1"})
    assert (off.kind, off.nodes) == ("recorder_off", (0, 1))
    assert off.evidence == ("node0: torch 2.1.2+cu121 has no flight recorder (torch 2.2 and later have one)",
                            "node1: torch 2.1.2+cu121 has no flight recorder (torch 2.2 and later have one)")
    assert off.fix.startswith("upgrade torch on those nodes to 2.2 or later") and "export" not in off.fix
    assert (abort.kind, abort.nodes) == ("watchdog_cannot_abort", (1,))
    assert abort.fix.startswith("export NCCL_ASYNC_ERROR_HANDLING=1 ")


@pytest.mark.parametrize("name,value,kind", [
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", "no_dump_on_timeout"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "false", "no_dump_on_timeout"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "sometimes", "no_dump_on_timeout"),    # torch refuses it
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "YES", None),
    ("TORCH_NCCL_ENABLE_MONITORING", "0", "no_dump_on_timeout"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", "watchdog_cannot_abort"),
    ("NCCL_ASYNC_ERROR_HANDLING", "0", "watchdog_cannot_abort"),          # the deprecated name
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", None),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", None),                        # aborts the communicator
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", None),
    ("TORCH_FR_BUFFER_SIZE", "x", "recorder_off"),
])
def test_each_variable_as_torch_reads_it(name, value, kind):
    (f,) = flight_recorder_findings(cluster(1, **{f"var__{name}": {0: value}}), {0: "node0"})
    assert f.kind == (kind or "") and f.severity == ("warn" if kind else "pass")
    if kind:
        assert f.evidence[0].startswith(f"node0: {name}={value}")


def test_the_torch_name_wins_over_the_deprecated_one_for_error_handling():
    facts = cluster(1, var__TORCH_NCCL_ASYNC_ERROR_HANDLING={0: "1"}, var__NCCL_ASYNC_ERROR_HANDLING={0: "0"})
    assert recorded(flight_recorder_findings(facts, {0: "node0"}))[0][1] == "pass"


def test_one_finding_per_cause_and_node_set_with_a_hosts_ranks_folded():
    """Under torchrun a host's ranks share its environment: named once, counted once."""
    names = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}
    facts = cluster(4, var__TORCH_NCCL_DUMP_ON_TIMEOUT={2: "0", 3: "0"},
                    var__TORCH_NCCL_ASYNC_ERROR_HANDLING={0: "0", 1: "0", 2: "0", 3: "0"})
    found = flight_recorder_findings(facts, names)
    assert recorded(found) == [("env.flight_recorder", "warn", "watchdog_cannot_abort", (0, 1, 2, 3)),
                               ("env.flight_recorder", "warn", "no_dump_on_timeout", (2, 3))]
    assert found[0].evidence == ("node0 (ranks 0, 1): TORCH_NCCL_ASYNC_ERROR_HANDLING=0: no handling of a "
                                 "timed-out or failed collective", "node1 (ranks 2, 3): TORCH_NCCL_ASYNC_ERROR_"
                                 "HANDLING=0: no handling of a timed-out or failed collective")
    assert found[0].fix.startswith("export TORCH_NCCL_ASYNC_ERROR_HANDLING=3")
    assert found[1].evidence == ("node1 (ranks 2, 3): TORCH_NCCL_DUMP_ON_TIMEOUT=0",)


def test_ranks_holding_one_values_record_are_judged_as_ranks_holding_equal_copies():
    # A torchrun node's workers hand the host one decoded record (fields.SHARED); the odd rank
    # between two of its holders is still named, and the groups list ranks in order.
    shared = cluster(1)[0]
    facts = {r: shared for r in (0, 1, 3, 4)} | cluster(5, torch__version={2: "2.13.0+cu124"})
    facts = {r: facts[r] for r in range(5)}
    [finding] = flagged(facts)
    assert finding.nodes == (2,)
    assert finding.evidence[1] == "torch.version: 2.14.1+cu124 on the other 4"
    assert [s.groups for s in compare(facts) if s.key == "torch.version"] == \
        [(("2.14.1+cu124", (0, 1, 3, 4)), ("2.13.0+cu124", (2,)))]
