"""The README's picture of the HTML report: the 3-node demo (scripts/demo.py, as `make demo`
runs it) writes its host's page, and headless Chromium photographs its first screen.

    $ .venv/bin/python scripts/readme_screenshot.py
    ... the demo's output ...
    docs/report.png: the first 1280x1400 of /tmp/netcheck-shot-*/report.html

Needs Debian's `chromium` (make test installs it) and, for the demo's namespaces, root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from demo import PAGE

REPO = Path(__file__).resolve().parent.parent
PICTURE = REPO / "docs" / "report.png"
WINDOW = "1280,1400"


def main() -> int:
    browser = shutil.which("chromium")
    if browser is None:
        sys.exit("needs headless Chromium: apt-get install chromium")
    page = Path(tempfile.mkdtemp(prefix="netcheck-shot-")) / PAGE   # this run's page, never an earlier one
    subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py"), "--out", str(page.parent)],
                   check=False, timeout=300)
    if not page.exists():
        sys.exit(f"the demo wrote no page at {page}")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WINDOW}", f"--screenshot={PICTURE}", page.as_uri()],
                   check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"{PICTURE.relative_to(REPO)}: the first {WINDOW.replace(',', 'x')} of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
