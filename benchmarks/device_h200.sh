#!/bin/bash
# netcheck on a one-GPU machine (the session's lent H200), in under 5 minutes:
#   1. scripts/gpu_check.sh: the RDMA/GPU facts as NCCL sees them, a 1 x 1 torchrun run, and two
#      nodes on the one GPU told apart by NCCL_HOSTID (NCCL's network transport between them),
#      with a process holding the GPU beside them (host.busy's GPU holder, as fuser finds one);
#   2. netcheck local's time on a GPU node (the facts readers included);
#   3. two netcheck "nodes" on the one GPU without NCCL_HOSTID, as NCCL refuses them
#      ("Duplicate GPU detected"): what netcheck says of it.
# Everything lands in OUT_DIR (default ./device-out); its summary goes to stdout.
#
#   benchmarks/device_h200.sh OUT_DIR
#
# DEVICE_CPU=1 runs the same steps on gloo without a GPU, to test this script itself.
set -uo pipefail

readonly OUT_DIR=${1:-device-out}
readonly PY=${NETCHECK_PYTHON:-python3}
mkdir -p "$OUT_DIR"
BACKEND=(--backend nccl)
if [[ -n ${DEVICE_CPU:-} ]]; then BACKEND=(--backend gloo); fi
readonly BACKEND
SWEEP=(-b 8 -e 256M -w 2 -n 10 --model-params 7e9 --timeout 75)

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# two_nodes LABEL: two netcheck nodes on 127.0.0.1, reports in OUT_DIR/LABEL-nodeK.{json,log};
# prints their exit codes.
two_nodes() {
  local label=$1 port pids=() n
  port=$(free_port)
  for n in 0 1; do
    timeout -k 5 100 "$PY" -m netcheck --rdzv "127.0.0.1:$port" --nnodes 2 --node-rank "$n" \
      --nproc-per-node 1 "${BACKEND[@]}" "${SWEEP[@]}" --json "$OUT_DIR/$label-node$n.json" \
      >"$OUT_DIR/$label-node$n.log" 2>&1 &
    pids+=("$!")
  done
  for n in 0 1; do
    wait "${pids[n]}"
    echo "$label node$n: exit $?"
  done
}

echo "== machine"
nvidia-smi -L 2>&1 || echo "no nvidia-smi"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'

echo "== 1. scripts/gpu_check.sh, a process holding the GPU beside it"
"$PY" -c 'import time, torch
x = torch.empty(1 << 28, device="cuda" if torch.cuda.is_available() else "cpu")
print("holder ready", flush=True); time.sleep(240)' >"$OUT_DIR/holder.log" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q ready "$OUT_DIR/holder.log" && break; sleep 0.5; done
if [[ -n ${DEVICE_CPU:-} ]]; then export GPU_CHECK_CPU_RANKS=1; fi
NETCHECK_PYTHON=$PY GPU_CHECK_RUN_TIMEOUT=90 scripts/gpu_check.sh "$OUT_DIR/gpu_check"
echo "gpu_check exit $?"
kill "$holder" 2>/dev/null
grep -h -A3 "host.busy" "$OUT_DIR/gpu_check/node0.log"

echo "== 2. netcheck local"
for _ in 1 2 3; do
  /usr/bin/time -f "netcheck local: %e s wall, %M KB max RSS" "$PY" -m netcheck local --json "$OUT_DIR/local.json" \
    >"$OUT_DIR/local.log" 2>&1
  tail -n 1 "$OUT_DIR/local.log"
done
"$PY" -m netcheck local -v 2>&1 | grep -E "gpu|GPU|rdma|nccl|NCCL" | head -n 30

echo "== 3. two nodes on one GPU, no NCCL_HOSTID"
two_nodes shared
for f in "$OUT_DIR"/shared-node0.log "$OUT_DIR"/shared-node1.log "$OUT_DIR"/gpu_check/node0.log; do
  echo "--- $f"
  cat "$f"
done
