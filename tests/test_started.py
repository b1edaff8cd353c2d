"""facts.started: how long ago this process started, read from the kernel. A shell that sleeps
and then execs Python in its own process makes the age known: the sleep is the process's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_process_knows_the_seconds_since_its_start_before_python_ran():
    done = subprocess.run(["sh", "-c", 'sleep 2; exec "$0" -c "$1"', sys.executable,
                           "from netcheck.facts.started import seconds_since_start; print(seconds_since_start())"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    age = float(done.stdout)
    assert 2.0 <= age < 30, (age, done.stderr)
