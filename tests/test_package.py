"""The package as a user gets it (issue 23): built by `python -m build`, installed from wheels
alone into a clean virtual environment, and run from there.

`python -m build` makes the sdist and then the wheel from the unpacked sdist, so a file the
wheel needs and MANIFEST.in forgets fails the build here. The clean environment gets the
wheel and the pinned torch with `pip install --only-binary=:all:`: pip may not build
anything, and its --report says where every distribution came from. From that environment
(its console script, a working directory outside the checkout, so nothing is imported from
the repository) `netcheck local` and a 2-node namespace run, bandwidth included, pass.
Beside that: the wheel's metadata keeps the loose bounds, the sdist carries what the README
names, and netcheck's own dependencies, the [plot] extra's included, resolve from wheels on
x86_64 and aarch64 for every Python the classifiers claim.

One build and one environment per test session (module-scoped fixtures), removed at the
end. The pip steps read the machine's pip configuration (torch from local disk) and PyPI.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster import NodeSpec
from nodes import GRACE, PORT, SPEED_VERDICTS, NodeRun, explain, finish_all, parse_report, scaled

REPO = Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # what the classifiers claim
ARCHES = ("x86_64", "aarch64")
# A node with glibc 2.28 or newer (RHEL 8, Ubuntu 20.04, every Grace Hopper image) takes
# wheels tagged manylinux2014 (glibc 2.17) up to manylinux_2_28.
GLIBC_MINORS = range(17, 29)
SMALL_SWEEP = ["-b", "1K", "-e", "64K", "-f", "4", "-w", "1", "-n", "2", "--bw-budget", "2"]
# Files the sdist must carry whatever the README says: `make test` and the CI script need them.
SDIST_MUST_CARRY = ("Makefile", "requirements-dev.txt", ".ci/run", "setup.cfg", "pyproject.toml",
                    "MANIFEST.in", "README.md")


def pinned_torch() -> str:
    """torch's pin in requirements-dev.txt, e.g. 'torch==2.13.0'."""
    pins = [ln.strip() for ln in (REPO / "requirements-dev.txt").read_text().splitlines()
            if ln.strip().startswith("torch==")]
    assert len(pins) == 1, pins
    return pins[0]


def clean_env() -> dict[str, str]:
    """os.environ without what would put this checkout's environment in the clean one's way."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}


def run(argv: list, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"


def built_anything(pip_log: str) -> list[str]:
    """pip's lines that say it built or prepared something from source."""
    return [ln for ln in pip_log.splitlines()
            if re.search(r"Building wheel|Running setup\.py|Preparing metadata|Getting requirements to build", ln)]


def wheels_only(report: dict) -> list[str]:
    """The distributions of a pip --report that did not come as a wheel file."""
    return [f"{i['metadata']['name']}: {i['download_info']['url']}" for i in report["install"]
            if not i["download_info"]["url"].endswith(".whl")]


# --------------------------------------------------------------------------------------
# fixtures: one build, one clean environment


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    source: Path  # the copy of the working tree that was built


@dataclass(frozen=True)
class Installed:
    home: Path
    python: Path
    netcheck: Path  # the console script
    report: dict  # pip's --report of the install
    log: str


@pytest.fixture(scope="module")
def workdir():
    path = Path(tempfile.mkdtemp(prefix="netcheck-package-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def copy_working_tree(target: Path) -> None:
    """The files a clean checkout of this working tree has (tracked, and new ones git does
    not ignore), not the virtual environments, caches and builds beside them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not there
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@pytest.fixture(scope="module")
def dists(workdir) -> Dists:
    source, out = workdir / "src", workdir / "dist"
    copy_working_tree(source)
    done = run([sys.executable, "-m", "build", "--outdir", out, source], cwd=workdir, timeout=scaled(300))
    assert done.returncode == 0, output(done)
    sdists, wheels = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, (sdists, wheels)
    return Dists(sdists[0], wheels[0], source)


@pytest.fixture(scope="module")
def installed(workdir, dists) -> Installed:
    home = workdir / "venv"
    done = run([sys.executable, "-m", "venv", home], cwd=workdir, timeout=scaled(120))
    assert done.returncode == 0, output(done)
    python = home / "bin" / "python"
    started = time.monotonic()
    # --no-compile: byte-compiling all of torch took 24 of the install's 35 s; the imports
    # below compile what they use, as a user's first run does.
    done = run([python, "-m", "pip", "install", "--no-compile", "--only-binary=:all:", "--report",
                workdir / "install.json",
                dists.wheel, pinned_torch()], cwd=workdir, timeout=scaled(600))
    assert done.returncode == 0, output(done)
    print(f"clean environment installed in {time.monotonic() - started:.0f} s")
    report = json.loads((workdir / "install.json").read_text())
    return Installed(home, python, home / "bin" / "netcheck", report, done.stdout + done.stderr)


# --------------------------------------------------------------------------------------
# the built wheel and sdist


def wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def runtime_requirements(wheel: Path) -> list[str]:
    return [r for r in wheel_metadata(wheel).get_all("Requires-Dist") if ";" not in r]


def test_wheel_metadata_keeps_the_loose_bounds(dists):
    meta = wheel_metadata(dists.wheel)
    runtime = runtime_requirements(dists.wheel)
    # netcheck installs into users' training environments: a lower bound only, never a pin or
    # a cap that would make pip replace their torch (or anything else).
    assert "torch>=2.1" in runtime, runtime
    assert [r for r in runtime if re.search(r"<|==|~=|!=|===", r)] == [], runtime
    assert not any(r.startswith("netifaces") and not r.startswith("netifaces-plus") for r in runtime), runtime
    assert meta["Requires-Python"] == ">=3.10"
    claimed = {c.rsplit(" :: ", 1)[1] for c in meta.get_all("Classifier")
               if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert claimed == set(PYTHONS)
    plot = [r for r in meta.get_all("Requires-Dist") if 'extra == "plot"' in r]
    assert [r.split(";")[0].strip() for r in plot] == ["matplotlib>=3.5"]


def test_wheel_holds_the_package_and_its_command(dists):
    assert dists.wheel.name.endswith("-py3-none-any.whl")  # pure Python: one wheel for every platform
    with zipfile.ZipFile(dists.wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"netcheck", dists.wheel.name.split("-py3")[0] + ".dist-info"}, tops
    assert "netcheck = netcheck.cli:entry" in entry_points
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def readme_paths() -> set[str]:
    """Every file or folder of the project that the README names in backquotes, as a path from
    the top (the README names the package's modules from inside netcheck/)."""
    named = set()
    for quoted in re.findall(r"`([^`\n]+)`", (REPO / "README.md").read_text()):
        for word in quoted.split():
            word = word.strip(".,;:()")
            for candidate in (word, f"netcheck/{word}"):
                if candidate.rstrip("/") and (REPO / candidate).exists() and candidate.strip("./"):
                    named.add(candidate.rstrip("/"))
    return named


def test_sdist_carries_the_schema_scripts_and_what_the_readme_names(dists):
    with tarfile.open(dists.sdist) as t:
        root = t.getnames()[0].split("/", 1)[0]
        carried = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    # The working tree that was built: each folder the README names must come whole.
    built = {str(p.relative_to(dists.source)) for p in dists.source.rglob("*") if p.is_file()}
    wanted = set(SDIST_MUST_CARRY)
    for path in readme_paths() | {"schema", "scripts", "tests", "docs", "benchmarks"}:
        wanted |= {f for f in built if f == path or f.startswith(path + "/")}
    assert {"schema/netcheck.report.schema.json", "scripts/netcheck.sbatch", "tests/cluster.py"} <= wanted
    missing = sorted(wanted - carried)
    assert not missing, f"{dists.sdist.name} lacks {missing}"
    assert not [n for n in carried if "__pycache__" in n or n.endswith((".pyc", ".pyo"))], root
    assert not [n for n in carried if n.startswith((".venv/", ".compat/", ".git/", "build/", "dist/"))]


# --------------------------------------------------------------------------------------
# the clean environment


def test_the_wheel_installs_from_wheels_alone_with_the_pinned_torch(installed, dists, workdir):
    report = installed.report
    assert wheels_only(report) == [], "not a wheel"
    assert built_anything(installed.log) == [], installed.log[-4000:]
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
    assert versions["netcheck"] and versions["torch"].split("+")[0] == pinned_torch().split("==")[1]
    assert "netifaces-plus" in versions and "netifaces" not in versions, versions
    ours = next(i for i in report["install"] if i["metadata"]["name"] == "netcheck")
    assert ours["is_direct"] and ours["download_info"]["url"].endswith(dists.wheel.name)
    # What the environment imports is the wheel's netcheck and netifaces-plus's netifaces, not
    # this checkout's, and the interface list comes (lo first in getifaddrs order here).
    probe = ("import json, importlib.metadata as m, netcheck, netifaces, torch;"
             "print(json.dumps([netcheck.__file__, netifaces.__file__, netifaces.interfaces(),"
             " m.distribution('netifaces-plus').version, torch.__version__]))")
    done = run([installed.python, "-c", probe], cwd=workdir, timeout=scaled(60))
    assert done.returncode == 0, output(done)
    package, module, interfaces, version, torch = json.loads(done.stdout.splitlines()[-1])
    site = str(installed.home / "lib")
    assert package.startswith(site) and module.startswith(site), (package, module)
    assert "lo" in interfaces and version == versions["netifaces-plus"] and torch == versions["torch"]


def test_the_plot_extra_resolves_from_wheels(installed, dists, workdir):
    done = run([installed.python, "-m", "pip", "install", "--dry-run", "--only-binary=:all:", "--report", "-",
                "--quiet", f"netcheck[plot] @ {dists.wheel.as_uri()}", pinned_torch()],
               cwd=workdir, timeout=scaled(300))
    assert done.returncode == 0, output(done)
    report = json.loads(done.stdout)
    assert wheels_only(report) == [], "not a wheel"
    assert "matplotlib" in {i["metadata"]["name"].lower() for i in report["install"]}, report["install"]


def resolve_for(requirements: list[str], arch: str, python: str, workdir: Path) -> tuple[str, str, object]:
    platforms = [f"manylinux_2_{m}_{arch}" for m in GLIBC_MINORS] + [f"manylinux2014_{arch}"]
    done = run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                *[a for p in platforms for a in ("--platform", p)],
                "--target", workdir / f"never-{arch}-{python}", *requirements],
               cwd=workdir, timeout=scaled(300))
    return arch, python, json.loads(done.stdout) if done.returncode == 0 else output(done)


def test_dependencies_resolve_from_wheels_on_x86_64_and_aarch64_for_every_python(dists, workdir):
    """netcheck's own requirements and the [plot] extra's, from the wheel's metadata, for each
    architecture and Python claimed. torch is left to torch, which publishes wheels for both
    (and is what a training environment has already); the wheel itself is py3-none-any."""
    meta = wheel_metadata(dists.wheel)
    requirements = [r.split(";")[0].strip() for r in meta.get_all("Requires-Dist")
                    if ";" not in r or 'extra == "plot"' in r]
    requirements = [r for r in requirements if not r.startswith("torch")]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda t: resolve_for(requirements, *t, workdir),
                                [(a, p) for a in ARCHES for p in PYTHONS]))
    failed = [f"{arch} {python}: {r}" for arch, python, r in results if isinstance(r, str)]
    assert failed == [], "\n".join(failed)
    for arch, python, report in results:
        assert wheels_only(report) == [], (arch, python)
        files = {i["metadata"]["name"].lower(): i["download_info"]["url"].rsplit("/", 1)[1]
                 for i in report["install"]}
        cp = "cp" + python.replace(".", "")
        assert arch in files["netifaces-plus"] and f"-{cp}-" in files["netifaces-plus"], files
        assert "matplotlib" in files and "psutil" in files and "tabulate" in files, files


@pytest.mark.root_required
def test_the_installed_netcheck_runs_local_and_a_two_node_cluster(installed, cluster, workdir, tmp_path):
    with cluster([NodeSpec(), NodeSpec()]) as c:
        local = c.run(0, [installed.netcheck, "local", "--json", "-"], timeout=scaled(30) + GRACE, cwd=workdir)
        assert local.returncode == 0, local.stdout + local.stderr
        assert parse_report(local.stdout)["verdict"] == "pass"
        runs = []
        for i in range(2):
            path = tmp_path / f"node{i}.json"
            argv = [installed.netcheck, "--rdzv", f"node0:{PORT}", "--nnodes", "2", "--node-rank", str(i),
                    "--timeout", str(scaled(60)), *SMALL_SWEEP, "--json", path]
            runs.append(NodeRun(i, c.popen(i, [str(a) for a in argv], cwd=workdir), path, time.monotonic()))
        finish_all(runs, scaled(60) + GRACE)
    judged = {f["check"] for r in runs for f in r.report["findings"] if f["severity"] != "pass"}
    assert judged <= SPEED_VERDICTS, explain(runs)
    assert [r.rc for r in runs] == [1 if judged else 0] * 2, explain(runs)
    host = runs[0].report
    assert host["bandwidth"]["sweeps"][0]["rows"] and host["bandwidth"]["backend"] == "gloo"
    assert sorted(host["healthy_nodes"] + host["faulty_nodes"]) == ["node0", "node1"]
    torch = next(i for i in installed.report["install"] if i["metadata"]["name"] == "torch")
    for node in host["nodes"]:  # both nodes ran the clean environment's python and torch
        env = node["env"]["values"]
        assert (env["python.executable"], env["torch.version"]) == (str(installed.python),
                                                                    torch["metadata"]["version"])
