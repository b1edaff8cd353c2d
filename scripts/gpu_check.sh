#!/bin/bash
# netcheck's nccl sweep on this machine's GPUs, in under 5 minutes, and its figures in one file.
#
#   scripts/gpu_check.sh                 # results in gpu-check-<host>/results.txt
#   scripts/gpu_check.sh OUT_DIR         # results in OUT_DIR/results.txt
#
# Two runs, one after the other, each bounded by GPU_CHECK_RUN_TIMEOUT seconds (120):
#   1. one node x N GPUs under torchrun: torchrun --standalone --nproc-per-node N -m netcheck
#      (each worker seated by its RANK, as a training job's would be);
#   2. two "nodes" on this one machine: two netcheck processes, --nnodes 2, each given half
#      of the GPUs through CUDA_VISIBLE_DEVICES and --nproc-per-node N/2 (a one-GPU machine:
#      that GPU to both), each with its own NCCL_HOSTID, so that NCCL takes them for two hosts:
#      their traffic goes over its network transport (the RDMA ports, else sockets) as between
#      nodes, not over NVLink, and two ranks on one GPU are allowed (NCCL refuses them within
#      a host: "Duplicate GPU detected").
# Both with --backend nccl (a GPU check that fell back to gloo would measure nothing) and
# --model-params 7e9, each writing its JSON report. results.txt says, per run and stage: the
# backend, the headline plateau busbw and its size range, the small-message latency, and
# the time one 7e9-parameter bf16 gradient all_reduce takes per step at that plateau. The
# JSON and text reports and the logs stay beside it. Before the runs, results.txt lists what
# NCCL's network transport will meet here, read from sysfs (facts.rdma; not proven by RDMA
# traffic): each RDMA port, the GID NCCL would pick on a RoCE port, each GPU's nearest HCA
# with ACS and NUMA, GPUDirect RDMA's needs and the libnccl torch would load.
#
# Without CUDA (no NVIDIA driver; torch without CUDA or NCCL; no visible GPU) it says which
# in one line on stderr and exits 3 at once, measuring nothing. Exit codes: 0 both runs
# passed, 1 warnings, 2 a failed check (the report says which), 3 could not run (no CUDA, a
# run that timed out or wrote no report). Python: $NETCHECK_PYTHON, else this checkout's
# .venv, else python3.
#
# GPU_CHECK_CPU_RANKS=N runs the same two runs with N CPU processes on gloo instead, to test
# this script itself on a machine without GPUs; its figures are not a GPU's.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
readonly REPO=${HERE%/scripts}
readonly MODEL_PARAMS=7e9
readonly RUN_TIMEOUT=${GPU_CHECK_RUN_TIMEOUT:-120}

no_cuda() {
  echo "gpu_check: no CUDA: $1; nothing measured" >&2
  exit 3
}

python_for_netcheck() {
  if [[ -n ${NETCHECK_PYTHON:-} ]]; then
    echo "$NETCHECK_PYTHON"
  elif [[ -x $REPO/.venv/bin/python ]]; then
    echo "$REPO/.venv/bin/python"
  else
    command -v python3
  fi
}

# What NCCL's network transport will meet on this node, a line per fact (facts.rdma).
RDMA=$(cat <<'PY'
import os
from netcheck.facts.rdma import read_rdma
from netcheck.rules.ibselect import gid_choice, nccl_version
from netcheck.rules.rdma import dmabuf_capable, nearest_hca
f = read_rdma()
version = nccl_version(f.libnccl.version)
if not f.ports:
    print("rdma: no RDMA device on this node: NCCL will use its socket transport")
for p in f.ports:
    gid = ""
    if p.link_layer == "Ethernet":
        g = gid_choice(p, os.environ, version)
        gid = f"; NCCL's GID: index {g.index} {g.gid or '(empty)'} ({g.type or 'no type'}, {g.family}{', ' + g.problem if g.problem else ''})"
    print(f"rdma: {p.device} port {p.port}: {p.state} {p.phys_state} {p.link_layer} {p.rate}, active MTU "
          f"{p.active_mtu or 'not in sysfs'}, netdev {p.netdev or '?'}, {len(p.gids)} GID(s){gid}")
for g in f.gpus:
    if f.hcas:
        hca, shared = nearest_hca(g, list(f.hcas))
        acs = sorted({b.acs for b in g.bridges[shared:] + hca.bridges[shared:]}) if shared else ["(no shared switch)"]
        near = f"nearest HCA {hca.name} (NUMA {hca.numa_node}, {shared} bridge(s) shared, ACS {'/'.join(acs)})"
    else:
        near = "no HCA"
    print(f"gpu: {g.address} NUMA {g.numa_node}, IOMMU {g.iommu}, {near}")
print(f"gpudirect: nvidia-peermem {'loaded' if f.peermem else 'not loaded'}; dma-buf "
      f"{'possible' if dmabuf_capable(f) else 'not possible'}; kernel {f.kernel}; driver {f.driver or 'none'}")
lib = f.libnccl
print(f"libnccl: {lib.path or 'none'} ({lib.version or 'version unknown'}, from {lib.source}); torch's own: "
      f"{lib.torch_path or 'none'}; read in {f.seconds * 1000:.1f} ms")
PY
)
readonly RDMA

# The GPUs this process may use, by torch's count (it honours CUDA_VISIBLE_DEVICES): the
# count, then a line describing them. It fails with the reason as its last line.
PROBE=$(cat <<'PY'
import os, sys
import torch
import torch.distributed as dist
if torch.version.cuda is None:
    sys.exit(f"torch {torch.__version__} is built without CUDA")
if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    sys.exit(f"torch {torch.__version__} sees no GPU (CUDA_VISIBLE_DEVICES="
             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
if not dist.is_available() or not dist.is_nccl_available():
    sys.exit(f"torch {torch.__version__} is built without NCCL")
n = torch.cuda.device_count()
nccl = ".".join(map(str, torch.cuda.nccl.version()))
print(n)
print(f"{n} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}")
PY
)
readonly PROBE

# The figures of one JSON report: the run, then one line per stage with a headline.
FIGURES=$(cat <<'PY'
import json, sys
label, path, rc, seconds = sys.argv[1:5]
try:
    with open(path) as f:
        report = json.load(f)
except (OSError, ValueError) as e:
    print(f"{label}: no report ({e.__class__.__name__}); netcheck exit {rc} after {seconds} s; see its log")
    sys.exit(0)


def size(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b / (1 << shift):g} {unit}"
    return f"{b} B"


bw = report.get("bandwidth") or {}
fails = ", ".join(sorted({f["check"] for f in report.get("findings", []) if f["severity"] == "fail"}))
if not bw:   # the phase did not run (one node, say): why, in the report's words
    why = next((f["summary"] for f in report.get("findings", []) if f["check"] == "run.skipped"
                and "bandwidth" in f["summary"]), "no bandwidth section in the report")
    print(f"{label}: netcheck exit {rc} after {seconds} s; failed checks: {fails or 'none'}; {why}")
    sys.exit(0)
print(f"{label}: netcheck exit {rc} after {seconds} s; backend {bw.get('backend') or 'none'} "
      f"({bw.get('backend_reason', '')}); {bw.get('nnodes', '?')} node(s) x "
      f"{bw.get('nproc_per_node', '?')} process(es); failed checks: {fails or 'none'}")
if bw.get("failure"):
    print(f"  stopped in stage {bw.get('failed_stage')}: {bw['failure']}")
for h in bw.get("headlines", []):
    if h.get("latency_from_us") is None:
        lat = "no latency-bound size measured"
    else:
        lat = "latency " + " .. ".join(f"{t:.1f} us at {size(s)}" for t, s in
                                       zip((h["latency_from_us"], h["latency_to_us"]), h["latency_sizes"]))
    if h.get("step_s") is None:
        step = "no per-step figure"
    else:
        params = f"{h['model_params']:.3g}".replace("e+0", "e").replace("e+", "e")
        step = (f"{params}-parameter {h['grad_dtype']} gradient "
                f"({h['gradient_bytes'] / 1e9:.1f} GB) all_reduce: {h['step_s']:.3f} s per step")
    print(f"  {h['stage']} ({h['ranks']} ranks, {h['op']}): plateau busbw {h['plateau_busbw']:.2f} GB/s "
          f"({size(h['plateau_from'])} .. {size(h['plateau_to'])}); {lat}; {step}")
for p in bw.get("pairs", []):
    print(f"  pair node{p['a']}-node{p['b']}: {p['busbw']:.2f} GB/s each way at {size(p['size'])}")
PY
)
readonly FIGURES

# The GPU count and their description; exits (no_cuda) when there are none to use. A
# machine without an NVIDIA driver is told apart before torch is imported, in milliseconds.
gpus() {
  local py=$1 out
  if [[ -n ${GPU_CHECK_CPU_RANKS:-} ]]; then
    printf '%s\n%s\n' "$GPU_CHECK_CPU_RANKS" "$GPU_CHECK_CPU_RANKS CPU processes on gloo (GPU_CHECK_CPU_RANKS: a test of the script, not a GPU)"
    return
  fi
  if [[ ! -e /dev/nvidiactl && ! -d /proc/driver/nvidia/gpus ]] && ! command -v nvidia-smi >/dev/null; then
    no_cuda "no NVIDIA driver on this machine (no /dev/nvidiactl, /proc/driver/nvidia/gpus or nvidia-smi)"
  fi
  if ! out=$("$py" -c "$PROBE" 2>&1); then
    no_cuda "${out##*$'\n'}"
  fi
  echo "$out"
}

# A free TCP port on this machine, for a rendezvous.
free_port() {
  "$1" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# bounded LABEL LOG CMD...: CMD under RUN_TIMEOUT, its output in LOG; prints "EXIT SECONDS".
bounded() {
  local label=$1 log=$2 started=$SECONDS rc=0
  shift 2
  echo "gpu_check: $label ..." >&2
  timeout --kill-after=10 "$RUN_TIMEOUT" "$@" >"$log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - started))"
}

# The worse of two exit codes in netcheck's terms: a timeout or any other code is 3.
worse() {
  local a=$1 b=$2
  if ((a > 3)); then a=3; fi
  if ((b > 3)); then b=3; fi
  echo $((a > b ? a : b))
}

main() {
  local py probed n info dir results port half worst=0 rc secs node
  py=$(python_for_netcheck)
  probed=$(gpus "$py")
  n=${probed%%$'\n'*}
  info=${probed#*$'\n'}
  local common=(--model-params "$MODEL_PARAMS" --timeout $((RUN_TIMEOUT - 20)))
  if [[ -z ${GPU_CHECK_CPU_RANKS:-} ]]; then
    common+=(--backend nccl)
  fi
  dir=${1:-gpu-check-$(hostname -s)}
  results=$dir/results.txt
  mkdir -p "$dir"
  {
    echo "gpu_check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname): $info"
    "$py" -m netcheck --version 2>&1 | head -n 1
    "$py" -c "$RDMA" 2>&1 || echo "rdma: facts not read"
  } >"$results"

  # 1. One node x N GPUs under torchrun; rank 0 writes the report (no {rank} in the path).
  read -r rc secs < <(bounded "1 node x $n under torchrun" "$dir/torchrun.log" \
    "$py" -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node "$n" \
    -m netcheck "${common[@]}" --json "$dir/torchrun.json")
  "$py" -c "$FIGURES" "1 node x $n (torchrun)" "$dir/torchrun.json" "$rc" "$secs" >>"$results"
  worst=$(worse "$worst" "$rc")
  if [[ ! -s $dir/torchrun.json ]]; then worst=3; fi

  # 2. Two "nodes" on this machine, half of the GPUs each (a one-GPU machine: that GPU both).
  half=$((n / 2))
  local halves=("$(seq -s, 0 $((half - 1)))" "$(seq -s, "$half" $((2 * half - 1)))") pids=()
  if ((n == 1)); then
    half=1
    halves=(0 0)
  fi
  port=$(free_port "$py")
  for node in 0 1; do
    NCCL_HOSTID=gpu-check-node$node CUDA_VISIBLE_DEVICES=${halves[node]} \
      bounded "2 nodes x $half: node $node (GPUs ${halves[node]})" \
      "$dir/node$node.log" "$py" -m netcheck --rdzv "127.0.0.1:$port" --nnodes 2 --node-rank "$node" \
      --nproc-per-node "$half" "${common[@]}" --json "$dir/node$node.json" >"$dir/node$node.rc" &
    pids+=("$!")
  done
  wait "${pids[@]}" || true
  read -r rc secs <"$dir/node0.rc"
  "$py" -c "$FIGURES" "2 nodes x $half (node 0's report)" "$dir/node0.json" "$rc" "$secs" >>"$results"
  worst=$(worse "$worst" "$rc")
  if [[ ! -s $dir/node0.json ]]; then worst=3; fi
  read -r rc secs <"$dir/node1.rc"
  echo "  node 1: netcheck exit $rc after $secs s" >>"$results"
  worst=$(worse "$worst" "$rc")
  cat "$results"
  echo "gpu_check: figures in $results; reports and logs in $dir/" >&2
  return "$worst"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
