"""`python tests/chaos ...`: the campaign's command line (runner.main)."""

import sys
from pathlib import Path

# Run as a directory, Python puts tests/chaos on the path; the package and the helpers it
# imports (cluster, faults, nodes) are found from tests/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.runner import main  # noqa: E402

sys.exit(main())
