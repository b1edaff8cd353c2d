"""The launcher scripts: scripts/netcheck.sbatch (Slurm) and scripts/netcheck-job.yaml (Kubernetes).

The sbatch script's own lines run on the namespace cluster with Slurm's variables as srun
sets them in each task; `srun` is a stand-in that runs the task where it is called, and
each node runs the script, as srun would run the task on each node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from cluster import NodeSpec
from netcheck import __version__
from netcheck.core.constants import LOCAL_TIMEOUT
from netcheck.facts.launcher import detect_launch, expand_hostlist, rdzv_from_env
from nodes import GRACE, SKIP_BANDWIDTH, read_report, scaled
from prom import series

REPO = Path(__file__).resolve().parents[1]
SBATCH = REPO / "scripts" / "netcheck.sbatch"
MANIFEST = REPO / "scripts" / "netcheck-job.yaml"
KUBEFLOW_READS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")

SRUN = """#!/bin/sh
# srun as one node sees it: the options dropped, the task run here.
while [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""
SCONTROL = (f"""#!/bin/sh
# scontrol show hostnames LIST, answered with netcheck's own expansion of Slurm host lists.
exec {sys.executable} -c 'import sys; from netcheck.facts.launcher import expand_hostlist; """
            """print("\\n".join(expand_hostlist(sys.argv[1])))' "$3"
""")


def tool(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)
    return folder


def first_host(nodelist: str, path: Path | str) -> str:
    """The script's first_host, sourced (main does not run) with this PATH."""
    done = subprocess.run([shutil.which("bash"), "-c", 'source "$1"; first_host "$2"', "sh", str(SBATCH), nodelist],
                          capture_output=True, text=True, env={**os.environ, "PATH": str(path)}, check=True)
    return done.stdout.strip()


# --- the sbatch script, here --------------------------------------------------------------------


def test_sbatch_script_parses_and_is_shellcheck_clean():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    done = subprocess.run(["shellcheck", str(SBATCH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_sbatch_asks_for_one_task_per_node():
    directives = [line.split()[1] for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "--ntasks-per-node=1" in directives


LISTS = ["node[0-2]", "gpu[07-09,12],login1", "rack[1-2]n[3-4]", "login1,login2", "a", "x-[001-003]-y"]


@pytest.mark.parametrize("nodelist", LISTS)
def test_first_host_without_scontrol_is_netchecks_expansion(nodelist, tmp_path):
    assert first_host(nodelist, tmp_path) == expand_hostlist(nodelist)[0]


@pytest.mark.parametrize("nodelist", LISTS)
def test_first_host_with_scontrol_takes_its_first_line(nodelist, tmp_path):
    path = f"{tool(tmp_path / 'bin', 'scontrol', SCONTROL)}:{os.environ['PATH']}"
    assert first_host(nodelist, path) == expand_hostlist(nodelist)[0]


def test_sbatch_script_outside_slurm_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    done = subprocess.run(["bash", str(SBATCH)], capture_output=True, text=True, env=env)
    assert done.returncode != 0 and "run this under sbatch or salloc" in done.stderr


# --- the sbatch script on the namespace cluster ------------------------------------------------------


def slurm_task_env(i: int, n: int, bin_dir: Path) -> dict[str, str | None]:
    """The variables srun sets in the task of node i of an n-node job, one task per node."""
    return {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"node[0-{n - 1}]", "SLURM_NNODES": str(n),
            "SLURM_NTASKS": str(n), "SLURM_NTASKS_PER_NODE": "1", "SLURM_NODEID": str(i),
            "SLURM_PROCID": str(i), "SLURM_LOCALID": "0", "SLURMD_NODENAME": f"node{i}",
            "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "MASTER_ADDR": None, "MASTER_PORT": None}


def sbatch_on(c, nodes: list[int], n: int, tmp_path: Path, args=lambda i: []) -> list[subprocess.Popen]:
    """The script on each of `nodes` of an n-node allocation, from one submit folder."""
    bin_dir = tool(tmp_path / "bin", "srun", SRUN)
    return [c.popen(i, ["bash", str(SBATCH), *args(i)], env=slurm_task_env(i, n, bin_dir), cwd=tmp_path)
            for i in nodes]


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    return [(p.returncode, out + err) for p in procs for out, err in [p.communicate(timeout=timeout)]]


@pytest.mark.root_required
def test_sbatch_on_three_healthy_nodes_collects_every_report(cluster, tmp_path):
    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        done = wait_all(sbatch_on(c, [0, 1, 2], 3, tmp_path,
                                  lambda i: ["--timeout", str(scaled(30)), *SKIP_BANDWIDTH]), 60)
    assert [rc for rc, _ in done] == [0, 0, 0], done
    folder = tmp_path / "netcheck-4242"
    assert sorted(p.name for p in folder.iterdir()) == [
        "exclude.txt", "netcheck-node0.json", "netcheck-node1.json", "netcheck-node2.json"]
    host = read_report(folder / "netcheck-node0.json")
    assert host["role"] == "host" and host["run_id"] == "4242"
    assert host["healthy_nodes"] == ["node0", "node1", "node2"]
    assert host["nodes"][0]["facts"]["launch"]["source"] == "slurm"
    assert read_report(folder / "netcheck-node2.json")["node_rank"] == 2
    assert (folder / "exclude.txt").read_text() == ""


@pytest.mark.root_required
def test_sbatch_with_a_node_missing_names_it_in_the_exclude_list_and_metrics(cluster, tmp_path):
    """node2 is in the allocation but never runs; --prom is node-local, one path per node."""
    def prom(i: int) -> Path:
        return tmp_path / f"textfile-node{i}.prom"

    with cluster([NodeSpec(), NodeSpec(), NodeSpec()]) as c:
        done = wait_all(sbatch_on(c, [0, 1], 3, tmp_path,
                                  lambda i: ["--timeout", str(scaled(20)), "--prom", str(prom(i))]),
                        scaled(20) + 15)
    assert [rc for rc, _ in done] == [4, 4], done   # node2's fault: the two that ran are healthy
    folder = tmp_path / "netcheck-4242"
    assert (folder / "exclude.txt").read_text() == "node2\n"
    assert read_report(folder / "netcheck-node0.json")["faulty_nodes"] == ["node2"]
    metrics = prom(0).read_text()
    assert series(metrics, "netcheck_node_faulty") == {
        (("node", f"node{r}"), ("node_rank", str(r))): int(r == 2) for r in range(3)}
    assert series(metrics, "netcheck_check")[(("check", "rdzv.join"), ("severity", "fail"))] == 1
    assert series(prom(1).read_text(), "netcheck_info")[(("role", "joiner"), ("version", __version__))] == 1


# --- the Kubernetes manifest ----------------------------------------------------------------------


def manifest() -> tuple[dict, dict]:
    docs = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    return docs["Service"], docs["Job"]


def container_env(job: dict, index: int) -> dict[str, str]:
    """The container's environment in pod `index`, the downward API's completion index resolved."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] if "value" in e else str(index) for e in container["env"]}


def test_manifest_names_the_variables_netcheck_reads_and_they_agree():
    service, job = manifest()
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert set(KUBEFLOW_READS) <= set(env)
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert spec["completionMode"] == "Indexed"
    assert int(env["PET_NNODES"]["value"]) == spec["completions"] == spec["parallelism"]
    assert pod["subdomain"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    assert env["PET_MASTER_ADDR"]["value"] == f"{job['metadata']['name']}-0.{pod['subdomain']}"
    assert int(env["PET_MASTER_PORT"]["value"]) == pod["containers"][0]["ports"][0]["containerPort"]
    (wait,) = pod["initContainers"]
    assert f"getent hosts {env['PET_MASTER_ADDR']['value']} " in wait["command"][-1]


# The Kubernetes API schema of the newest release kubernetes-validate knows (pinned in
# requirements-dev.txt: 1.37); strict, so a misspelt or misplaced field fails too.
K8S_VERSION = ".".join(kubernetes_validate.latest_version().split(".")[:2])


def test_every_object_of_the_manifest_is_valid_kubernetes():
    for obj in yaml.safe_load_all(MANIFEST.read_text()):
        assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == K8S_VERSION, obj["kind"]


def test_the_validator_rejects_a_misplaced_field():
    _, job = manifest()
    broken = {**job, "spec": {**job["spec"], "completionIndex": 0}}
    with pytest.raises(kubernetes_validate.ValidationError, match="completionIndex"):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_netcheck_reads_the_manifests_variables_as_kubeflows():
    _, job = manifest()
    for index in range(job["spec"]["completions"]):
        env = container_env(job, index)
        launch = detect_launch(env, None, None, None, local_gpus=0)
        assert (launch.source, launch.node_rank, launch.nnodes_max) == ("kubeflow", index, 2)
        assert rdzv_from_env(env) == "netcheck-0.netcheck:29500"


@pytest.mark.root_required
def test_manifests_command_forms_the_cluster_on_namespaces(cluster, tmp_path):
    """Pods netcheck-0 and netcheck-1, the Service's names in /etc/hosts, the init
    container's and the container's commands and environment as the manifest gives them."""
    _, job = manifest()
    (wait,) = job["spec"]["template"]["spec"]["initContainers"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    argv = [str(Path(sys.executable).parent / container["command"][0]), *container["args"]]
    names = [f"netcheck-{i}" for i in range(2)]
    hosts = tuple(f"198.18.0.{10 + i} {name}.netcheck" for i, name in enumerate(names))
    with cluster([NodeSpec(hostname=name, hosts_extra=hosts) for name in names]) as c:
        assert [n.addr for n in c.nodes] == [h.split()[0] for h in hosts]
        assert c.run(1, wait["command"], timeout=scaled(5)).returncode == 0
        procs = [c.popen(i, [*argv, *SKIP_BANDWIDTH, "--json", str(tmp_path / f"{names[i]}.json")],
                         env={**container_env(job, i), "MASTER_ADDR": None, "MASTER_PORT": None})
                 for i in range(2)]
        done = wait_all(procs, 150)
    assert [rc for rc, _ in done] == [0, 0], done
    host = read_report(tmp_path / "netcheck-0.json")
    assert host["role"] == "host" and host["healthy_nodes"] == names
    assert host["nodes"][1]["facts"]["launch"]["source"] == "kubeflow"


# --- the GPU check ----------------------------------------------------------------------------------

GPU_CHECK = REPO / "scripts" / "gpu_check.sh"
NVIDIA_DRIVER = (Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()
                 or shutil.which("nvidia-smi"))


@pytest.mark.skipif(bool(NVIDIA_DRIVER), reason="this machine has an NVIDIA driver: the script would measure")
def test_gpu_check_without_cuda_says_so_in_one_line_and_exits_3_at_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")}
    done = subprocess.run(["bash", str(GPU_CHECK), str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=10)
    assert done.returncode == 3 and done.stdout == "", done
    assert done.stderr.splitlines() == [
        "gpu_check: no CUDA: no NVIDIA driver on this machine (no /dev/nvidiactl, /proc/driver/nvidia/gpus "
        "or nvidia-smi); nothing measured"]
    assert not (tmp_path / "out").exists()
    assert subprocess.run(["shellcheck", str(GPU_CHECK)], capture_output=True).returncode == 0


def test_gpu_check_runs_its_two_runs_on_cpu_ranks_and_says_why_a_lone_node_measured_nothing(tmp_path):
    """GPU_CHECK_CPU_RANKS=1, the script's own test mode: the 1 x 1 torchrun run says why it
    measured no bandwidth (no other node), the two nodes on the one "GPU" (each its own
    NCCL_HOSTID, as on a one-GPU machine) measure, and their differing NCCL_HOSTID is no
    environment mismatch (one per host is its meaning)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")},
           "GPU_CHECK_CPU_RANKS": "1", "GPU_CHECK_RUN_TIMEOUT": str(int(scaled(60))),
           "NETCHECK_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(GPU_CHECK), str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=2 * scaled(60) + 30)
    assert done.returncode in (0, 1), done
    lines = (tmp_path / "results.txt").read_text().splitlines()
    (lone,) = [ln for ln in lines if ln.startswith("1 node x 1 (torchrun)")]
    assert "the bandwidth phase was not run: no other node is in the run" in lone, lines
    (two,) = [ln for ln in lines if ln.startswith("2 nodes x 1 (node 0's report)")]
    assert "backend gloo" in two, lines
    host = read_report(tmp_path / "node0.json")
    assert host["bandwidth"]["headlines"] and host["bandwidth"]["nnodes"] == 2
    assert not [f for f in host["findings"] if f["check"] == "env.mismatch" and f["severity"] != "pass"], host


# --- the gates: a JobSet's init container, node-problem-detector's plugin -------------------------

JOBSET = REPO / "scripts" / "netcheck-jobset.yaml"
NPD = REPO / "scripts" / "netcheck-npd.yaml"
# JobSet's own fields (jobset.x-k8s.io/v1alpha2, its CRD's openAPIV3Schema): the CRD is not in
# kubernetes-validate, and not fetched here, so these are checked by name; every Job inside is
# checked against the Kubernetes schema, strict.
JOBSET_SPEC = {"coordinator", "failurePolicy", "managedBy", "network", "replicatedJobs", "startupPolicy",
               "successPolicy", "suspend", "ttlSecondsAfterFinished", "volumeClaimPolicies"}
REPLICATED_JOB = {"dependsOn", "groupName", "name", "replicas", "template"}
NETWORK = {"enableDNSHostnames", "publishNotReadyAddresses", "subdomain"}


def jobset() -> dict:
    return yaml.safe_load(JOBSET.read_text())


def test_every_job_of_the_jobset_is_valid_kubernetes_and_the_jobset_names_only_its_own_fields():
    js = jobset()
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and set(js["spec"]) <= JOBSET_SPEC
    assert set(js["spec"]["network"]) <= NETWORK
    for rj in js["spec"]["replicatedJobs"]:
        assert set(rj) <= REPLICATED_JOB and {"name", "template"} <= set(rj), rj["name"]
        assert all(d["status"] in ("Ready", "Complete") for d in rj.get("dependsOn", ())), rj["name"]
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": rj["name"]},
               "spec": rj["template"]["spec"]}
        assert kubernetes_validate.validate(job, K8S_VERSION, strict=True) == K8S_VERSION, rj["name"]


def test_the_jobset_starts_its_leader_first_and_every_pod_behind_netchecks_node_local_mode():
    js = jobset()
    leader, workers = js["spec"]["replicatedJobs"]
    assert "dependsOn" not in leader and workers["dependsOn"] == [{"name": leader["name"], "status": "Ready"}]
    for rj in (leader, workers):
        pod = rj["template"]["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert init["command"] == ["sh", "-c", "netcheck local; [ $? -ne 2 ]"]
        assert rj["template"]["spec"]["backoffLimit"] == 0
        endpoint = pod["containers"][0]["command"][pod["containers"][0]["command"].index("--rdzv-endpoint") + 1]
        assert endpoint == f"{js['metadata']['name']}-{leader['name']}-0-0.{js['metadata']['name']}:29500"


def npd() -> tuple[dict, dict]:
    docs = {d["kind"]: d for d in yaml.safe_load_all(NPD.read_text())}
    return docs["ConfigMap"], docs["DaemonSet"]


def test_every_object_of_the_npd_manifest_is_valid_kubernetes():
    for obj in yaml.safe_load_all(NPD.read_text()):
        assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == K8S_VERSION, obj["kind"]


def go_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    assert text[-1] in units and text[:-1].isdigit(), text
    return int(text[:-1]) * units[text[-1]]


def test_the_npd_plugin_config_keeps_npds_own_rules_and_gives_netcheck_its_time():
    """What NPD's CustomPluginConfig.Validate refuses at start-up (pkg/custompluginmonitor/types):
    a plugin other than "custom", a rule's timeout over the global one, a permanent rule whose
    condition has no default, a path that is not there; and netcheck's own bound inside the
    plugin's."""
    config_map, daemon = npd()
    monitor = json.loads(config_map["data"]["netcheck-monitor.json"])
    (container,) = daemon["spec"]["template"]["spec"]["containers"]
    (mount,) = container["volumeMounts"]
    assert monitor["plugin"] == "custom" and f"--config.custom-plugin-monitor={mount['mountPath']}/" \
        "netcheck-monitor.json" in container["command"]
    timeout = go_duration(monitor["pluginConfig"]["timeout"])
    assert LOCAL_TIMEOUT + GRACE < timeout < go_duration(monitor["pluginConfig"]["invoke_interval"])
    defaults = {c["type"] for c in monitor["conditions"]}
    for rule in monitor["rules"]:
        assert go_duration(rule["timeout"]) <= timeout and rule["condition"] in defaults, rule
        assert rule["path"] == f"{mount['mountPath']}/netcheck-plugin.sh" and "netcheck-plugin.sh" in config_map["data"]
    assert daemon["spec"]["template"]["spec"]["hostNetwork"] is True


def npd_plugin(tmp_path: Path) -> Path:
    config_map, _ = npd()
    return tool(tmp_path, "netcheck-plugin.sh", config_map["data"]["netcheck-plugin.sh"]) / "netcheck-plugin.sh"


def test_the_npd_plugin_says_unknown_where_netcheck_cannot_run(tmp_path):
    done = subprocess.run([str(npd_plugin(tmp_path))], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                          timeout=10)
    assert done.returncode == 2 and "netcheck" in done.stdout, done


@pytest.mark.root_required
def test_the_gates_node_local_commands_pass_a_healthy_node_and_hold_one_whose_fabric_link_is_down(cluster, tmp_path):
    """The JobSet's init container and NPD's plugin, as their manifests give them, on two nodes
    whose NCCL is set to data0: on node1 data0 has lost its carrier. node0: the pod goes on and
    NPD says OK; node1: the pod is held and NPD says problem, with the failing check's line."""
    init = jobset()["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["initContainers"][0]
    plugin = npd_plugin(tmp_path / "npd")
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "NCCL_SOCKET_IFNAME": "data0"}
    with cluster([NodeSpec(), NodeSpec()]) as c:
        for i in range(2):
            c.add_decoy(i, "data0", f"198.19.10.{i + 1}/24")
        subprocess.run(["ip", "netns", "exec", c.nodes[1].ns, "ip", "link", "set", "data0p", "down"], check=True)
        held = [c.run(i, init["command"], timeout=scaled(30), env=env) for i in range(2)]
        said = [c.run(i, [str(plugin)], timeout=scaled(30), env=env) for i in range(2)]
    assert [d.returncode for d in held] == [0, 1], held
    assert [d.returncode for d in said] == [0, 1], said
    assert said[0].stdout == "netcheck local: no check fails on this node\n"
    assert said[1].stdout.startswith("FAIL  nic.route") and "data0" in said[1].stdout, said[1].stdout
