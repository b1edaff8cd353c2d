"""The mesh phase's cost: 16 namespace nodes x 2 candidate interfaces, every pair.

Each node has its real interface (eth0 on the shared bridge) and a second running,
addressed interface (a decoy veth on its own subnet 198.19.N.1/24), so every node offers
two candidates and connects to 15 x 2 of its peers'. The host's JSON gives the mesh
phase's wall time (the issue's target: 2 s at most). Run with `--nodes N` for another
size, `--mesh sample:K` to time the sampled mode.

Reproduce, from the repository's root (root; about a minute: 16 processes import torch on this machine's cores):
    .venv/bin/python benchmarks/mesh_scale.py [--nodes 16] [--mesh full]

Sample output: see benchmarks/RESULTS.md, "Mesh at 16 nodes".
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import PORT, PY, Cluster, NodeSpec, finish, machine_facts, start


def run_once(nodes: int, mesh: str, folder: Path) -> dict:
    with Cluster([NodeSpec() for _ in range(nodes)]) as c:
        for i in range(nodes):
            c.add_decoy(i, "ens9", f"198.19.{i}.1/24")
        runs = [start(c, i, [PY, "-m", "netcheck", "--rdzv", f"node0:{PORT}", "--nnodes", str(nodes),
                             "--node-rank", str(i), "--timeout", "120", "--mesh", mesh,
                             "--skip", "env", "--json", str(folder / f"node{i}.json")], f"node{i}")
                for i in range(nodes)]
        done = [finish(c, t, 180) for t in runs]
    host = json.loads((folder / "node0.json").read_text())
    mesh_finding = next(f for f in host["findings"] if f["check"] == "mesh.connect")
    return {"exit codes": [t.proc.returncode for t in done], "verdict": host["verdict"],
            "mesh seconds": host["timings"].get("mesh"), "mesh finding": mesh_finding["summary"],
            "slowest node wall": max(t.seconds for t in done),
            "failed checks": sorted({f["check"] for f in host["findings"] if f["severity"] == "fail"})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--mesh", default="full")
    args = parser.parse_args()
    print(machine_facts())
    with tempfile.TemporaryDirectory() as folder:
        result = run_once(args.nodes, args.mesh, Path(folder))
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
