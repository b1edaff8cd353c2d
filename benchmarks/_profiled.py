"""netcheck's command line under cProfile (its main thread: the store's own thread is C++), the
profile written to OUT, ending as netcheck's entry point ends (os._exit with its code);
benchmarks/scale.py --profile runs the host so:

    python benchmarks/_profiled.py OUT.prof --rdzv node0:29500 ...
    python -c "import pstats; pstats.Stats('OUT.prof').sort_stats('tottime').print_stats(30)"
"""

from __future__ import annotations

import cProfile
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck import cli  # noqa: E402


def main() -> None:
    profile = cProfile.Profile()
    code = profile.runcall(cli.main, sys.argv[2:])
    profile.dump_stats(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
