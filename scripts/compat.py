"""The torch compatibility matrix: one cached environment per torch release, the `compat`
tests run in each.

    $ make compat                                  # every release in setup.cfg's matrix
    $ make compat COMPAT_TORCH="2.4.1 2.13.0"      # some of them
    torch   result                      seconds  date
    2.4.1   pass (6 passed)             212      2026-12-01
    2.13.0  pass (6 passed)             190      2026-12-01

Each environment is COMPAT_DIR/torch-VERSION (default .compat/, ignored by git): torch
from PyPI, the test tools pinned as in requirements-dev.txt, netcheck itself in editable
mode. Everything but netcheck comes from wheels only (--only-binary=:all:), as on a node
without a compiler: a dependency that would need one fails the release. PyPI's Linux
wheels carry the CUDA libraries (about 5 GB an environment); the environments share one
pip cache, so a rebuild downloads nothing it has seen. pip runs without the machine's pip
configuration (files and PIP_* variables alike), so a local cap on torch versions or a
local build does not stand in for the release under test. An
environment built by another clone sharing the folder is pointed at this checkout first.
The `compat` tests (pytest -m compat) are those that touch every torch seam: a healthy
multi-node run with every phase, bandwidth included; the torchrun mode; the host killed
mid-run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# torch and what only the project's own environment needs stay out: the release under test
# brings its own torch (and numpy, or none, as users have it).
NOT_SHARED = ("torch", "numpy", "matplotlib", "build")


def test_requirements() -> list[str]:
    lines = (REPO / "requirements-dev.txt").read_text().splitlines()
    return [ln.strip() for ln in lines
            if ln.strip() and not ln.startswith("#") and ln.split("==")[0].strip() not in NOT_SHARED]


# The machine's pip settings that choose what is installed, whether from a file or from the
# environment (PIP_FIND_LINKS=/opt/wheels would give a local torch 2.13.0+cpu, not PyPI's).
CHOOSING = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT",
            "PIP_PRE", "PIP_ONLY_BINARY", "PIP_NO_BINARY", "PIP_PREFER_BINARY")


def pip_env(cache: Path) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if k not in CHOOSING}
    return {**kept, "PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(cache),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def environment(root: Path, version: str) -> Path:
    """The environment for one torch release, built once (a marker file says it is whole)."""
    root = root.absolute()  # pip and pytest run elsewhere
    home = root / f"torch-{version}"
    python = home / "bin" / "python"
    env = pip_env(root / "pip-cache")
    if (home / ".ready").exists():  # built: only the test tools the project added since
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--only-binary=:all:", *test_requirements()],
                       env=env, check=True)
        if not tests_this_checkout(python):  # built by another clone sharing --dir
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(REPO)],
                           env=env, check=True)
        return python
    print(f"building {home} (torch {version}) ...", flush=True)
    venv.create(home, with_pip=True, clear=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    # Wheels only, as a user's node without a compiler installs: every dependency of netcheck
    # and of this torch release must have a wheel for this Python (issue 23).
    subprocess.run(pip + ["--only-binary=:all:", f"torch=={version}", *test_requirements()], env=env, check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(REPO)], env=env, check=True)
    (home / ".ready").touch()
    return python


def tests_this_checkout(python: Path) -> bool:
    """Whether the environment's editable netcheck is this checkout's, not another clone's."""
    done = subprocess.run([str(python), "-c", "import netcheck; print(netcheck.__file__)"],
                          cwd="/", capture_output=True, text=True)
    return done.returncode == 0 and Path(done.stdout.strip()).resolve().parent == (REPO / "netcheck").resolve()


def run_compat_tests(python: Path) -> tuple[int, str, float]:
    """(exit code, pytest's last line, seconds) for the compat tests under this python."""
    started = time.monotonic()
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-m", "compat", "-p", "no:cacheprovider"],
                          cwd=REPO, env={**os.environ, "CI": "true"}, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode:
        print(done.stdout[-6000:] + done.stderr[-2000:], file=sys.stderr)
    return done.returncode, lines[-1] if lines else done.stderr.strip()[-200:], time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("versions", nargs="+", help="torch releases, e.g. 2.4.1")
    p.add_argument("--dir", type=Path, default=REPO / ".compat", help="where the environments are kept")
    args = p.parse_args()
    rows, failed = [], 0
    for version in args.versions:
        try:
            rc, last, seconds = run_compat_tests(environment(args.dir, version))
        except subprocess.CalledProcessError as e:
            rc, last, seconds = 1, f"could not build the environment: {e}", 0.0
        failed += rc != 0
        rows.append((version, f"{'pass' if rc == 0 else 'FAIL'} ({last.strip('= ')})", f"{seconds:.0f}"))
    today = datetime.date.today().isoformat()
    print(f"{'torch':8}{'result':60}{'seconds':>8}  date")
    for version, result, seconds in rows:
        print(f"{version:8}{result:60}{seconds:>8}  {today}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
