"""`make demo` and `make demo-fault` (scripts/demo.py) as a person runs them (issue 62).

demo-fault's failure is the demo's, not the build's: make exits 0, with no "Error 2" line, and
the host's own exit is shown. The demo without root works beside another user's demo folder:
each run writes its page into a folder of its own, and never reads an earlier one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_cli import subprocess_env
from test_outputs import as_nobody

REPO = Path(__file__).resolve().parent.parent
PAGE_LINE = re.compile(r"^the host's report as a web page: (\S+)$", re.M)

pytestmark = pytest.mark.root_required


def test_make_demo_fault_exits_0_and_shows_the_host_s_exit_4():
    # -o: the virtual environment is taken as it is (a test never reinstalls it).
    done = subprocess.run(["make", "-o", ".venv/.installed", "demo-fault"], cwd=REPO, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Error" not in done.stderr and "***" not in done.stderr, done.stderr
        assert "node0 (the host): exit 4 - verdict FAIL" in done.stdout.splitlines()   # node2's fault
        assert "the demo found what it planted, so it exits 0" in done.stdout
    finally:
        for page in PAGE_LINE.findall(done.stdout):
            shutil.rmtree(Path(page).parent, ignore_errors=True)


def test_the_demo_without_root_works_beside_another_user_s_demo_folder():
    """As the user nobody (loopback, in a network namespace of its own so port 29500 is its
    own): root's demo folder, with a page in it, stays as it was, and the run's page is a new
    one in a folder of nobody's."""
    stale = Path("/tmp/netcheck-demo")
    made = not stale.exists()
    if made:
        stale.mkdir(mode=0o700)
        (stale / "report.html").write_text("root's earlier page")
    pages: list[str] = []
    try:
        done = as_nobody([str(REPO / ".venv" / "bin" / "python"), "scripts/demo.py"], timeout=300)
        pages = PAGE_LINE.findall(done.stdout)
        assert "not root, so no network namespaces" in done.stdout, done.stdout + done.stderr
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr
        assert re.search(r"^node0 \(the host\): exit [01] - verdict (PASS|WARN)$", done.stdout, re.M), done.stdout
        assert len(pages) == 1, done.stdout
        page = Path(pages[0])
        assert page.parent != stale and page.parent.name.startswith("netcheck-demo-")
        assert page.parent.stat().st_uid == page.stat().st_uid == 65534
        assert "<html" in page.read_text()[:200].lower()
        if made:
            assert (stale / "report.html").read_text() == "root's earlier page"
    finally:
        for page_path in pages:
            shutil.rmtree(Path(page_path).parent, ignore_errors=True)
        if made:
            shutil.rmtree(stale)


def test_an_earlier_page_in_out_is_never_shown_as_this_run_s(tmp_path):
    """--out DIR (the README's screenshot uses it): a page left there by an earlier run is
    removed first: the page named is this run's."""
    (tmp_path / "report.html").write_text("an earlier run's page")
    os.chmod(tmp_path, 0o755)
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "scripts/demo.py", "--fault", "--out",
                           str(tmp_path)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert PAGE_LINE.findall(done.stdout) == [str(tmp_path / "report.html")]
    assert "an earlier run's page" not in (tmp_path / "report.html").read_text()
