"""The README's picture of the HTML report: the 3-node demo (scripts/demo.py, as `make demo`
runs it) writes its host's page, and headless Chromium photographs its first screen.

    $ .venv/bin/python scripts/readme_screenshot.py
    ... the demo's output ...
    docs/report.png: the first 1280x1400 of /tmp/netcheck-demo/report.html

Needs Debian's `chromium` (make test installs it) and, for the demo's namespaces, root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from demo import HTML

REPO = Path(__file__).resolve().parent.parent
PICTURE = REPO / "docs" / "report.png"
WINDOW = "1280,1400"


def main() -> int:
    browser = shutil.which("chromium")
    if browser is None:
        sys.exit("needs headless Chromium: apt-get install chromium")
    HTML.unlink(missing_ok=True)
    subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py")], check=False, timeout=300)
    if not HTML.exists():
        sys.exit(f"the demo wrote no page at {HTML}")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WINDOW}", f"--screenshot={PICTURE}", HTML.as_uri()],
                   check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"{PICTURE.relative_to(REPO)}: the first {WINDOW.replace(',', 'x')} of {HTML}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
