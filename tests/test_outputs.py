"""The report is never lost to an output path (issue 62).

Every output flag (--json, --exclude-file, --prom, --html, on `netcheck` and its sub-commands,
and `netcheck report --html`) is checked before anything runs: a folder, a missing folder, an
empty path or a place that takes no file is one line and exit 64, and the check leaves nothing
behind. A file that cannot be written at the end keeps the text report on the terminal, names
the file in one line and exits 3; no temporary file stays beside a target, written or not.
Real files, folders, pipes, mounts and processes throughout: no mocks.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from netcheck import cli
from netcheck.core.constants import EXIT_INTERNAL, EXIT_USAGE
from netcheck.render import outfile
from nodes import free_port
from test_cli import LAUNCHER_VARS, assert_one_usage_line, run_netcheck, subprocess_env

REPO = Path(__file__).resolve().parent.parent
FILE_FLAGS = ("--json", "--exclude-file", "--prom", "--html")
USAGE_SECONDS = 5.0   # the bound for a refused output path, a process start included


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher in the environment: the command line alone decides (as test_cli's)."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def leftovers(folder: Path) -> list[str]:
    """netcheck's temporary files in `folder`: none may stay there, whatever happened."""
    return sorted(n for n in os.listdir(folder) if n.startswith(outfile.TEMP_PREFIX))


def saved_report(folder: Path) -> Path:
    """A real report to render again: `netcheck local --json`."""
    path = folder / "saved.json"
    assert cli.main(["local", "-q", "--json", str(path)]) in (0, 1, 2)
    return path


# --- render.outfile, the one check and the one writer ------------------------------------------------


def test_a_writable_target_has_no_problem_and_the_check_leaves_nothing(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    before = sorted(os.listdir(tmp_path))
    assert outfile.problem(str(tmp_path / "new.json")) is None
    assert outfile.problem(str(tmp_path / "old.json")) is None
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("name, words", [
    ("", "the path is empty"),
    (".", "is a folder: give the path of a file"),
    ("sub/", "is a folder: give the path of a file"),
    ("missing/r.json", "the folder {tmp}/missing does not exist"),
    ("plain/r.json", "{tmp}/plain is not a folder"),
])
def test_a_target_no_file_can_be_written_to_is_named(name, words, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "plain").write_text("a file, not a folder")
    path = "" if not name else str(tmp_path / name) + ("/" if name.endswith("/") else "")
    assert outfile.problem(path) == words.format(tmp=tmp_path)


def test_write_file_replaces_whole_with_the_umask_s_mode_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("an earlier run's")
    outfile.write_file(str(target), '{"verdict": "pass"}\n')
    outfile.write_file(str(tmp_path / "p.png"), b"\x89PNG")
    assert target.read_text() == '{"verdict": "pass"}\n'
    assert (tmp_path / "p.png").read_bytes() == b"\x89PNG"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert leftovers(tmp_path) == []


def test_a_failed_write_removes_its_temporary_file(tmp_path):
    """The rename fails (a folder took the target's name after the check): the error is the
    caller's to report, and nothing of the attempt stays in the folder."""
    (tmp_path / "r.json").mkdir()
    with pytest.raises(IsADirectoryError):
        outfile.write_file(str(tmp_path / "r.json"), "{}")
    assert leftovers(tmp_path) == []
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_pipe_is_written_in_place_and_stays_a_pipe(tmp_path):
    """A target that is not a regular file (a pipe, /dev/stdout, /dev/null) is written where it
    is: renamed over, /dev/null itself would be replaced by a file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert outfile.problem(str(fifo)) is None
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    for _ in range(200):   # until the reader holds the pipe open
        try:
            outfile.write_file(str(fifo), "report\n")
            break
        except OSError:
            time.sleep(0.01)
    reader.join(5)
    assert got == [b"report\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert leftovers(tmp_path) == []


def test_a_pipe_nobody_reads_is_an_error_at_once_not_a_wait(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(OSError):
        outfile.write_file(str(fifo), "report\n")
    assert time.monotonic() - start < 1
    assert stat.S_ISFIFO(fifo.stat().st_mode)


# --- the command line: every flag, every sub-command, checked before anything runs -------------------


def bad_paths(tmp_path: Path) -> list[tuple[str, str]]:
    """(path, the words after it) for the cases no user can mean."""
    (tmp_path / "plain").write_text("x")
    return [(str(tmp_path), "is a folder: give the path of a file"),
            (str(tmp_path / "missing" / "r"), f"the folder {tmp_path}/missing does not exist"),
            (str(tmp_path / "plain" / "r"), f"{tmp_path}/plain is not a folder")]


@pytest.mark.parametrize("flag", FILE_FLAGS)
def test_every_output_flag_refuses_a_bad_path_in_one_line(flag, tmp_path, clean_env, capsys):
    for path, words in bad_paths(tmp_path):
        assert cli.main(["--rdzv", "node0", flag, path]) == EXIT_USAGE
        out, err = capsys.readouterr()
        assert_one_usage_line(err, out, f"{flag} {path}: {words}")
    assert cli.main(["--rdzv", "node0", flag, ""]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, f"{flag} '': the path is empty")


@pytest.mark.parametrize("flag", ("--exclude-file", "--prom"))
def test_only_json_writes_to_stdout(flag, clean_env, capsys):
    assert cli.main(["--rdzv", "node0", flag, "-"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, f"{flag} -: only --json writes to stdout: give a file's path")


@pytest.mark.parametrize("argv", [
    ["local", "--json", "{path}"],
    ["local", "--html", "{path}"],
    ["probe", "127.0.0.1:1", "--json", "{path}"],
    ["probe", "127.0.0.1:1", "--html", "{path}"],
    ["inspect", "--rdzv", "127.0.0.1:1", "--json", "{path}"],
    ["inspect", "--rdzv", "127.0.0.1:1", "--prom", "{path}"],
    ["inspect", "--rdzv", "127.0.0.1:1", "--html", "{path}"],
    ["report", "{saved}", "--html", "{path}"],
])
def test_every_sub_command_refuses_a_bad_path_before_it_looks(argv, tmp_path, clean_env, capsys):
    saved = saved_report(tmp_path)
    capsys.readouterr()
    flag = argv[argv.index("{path}") - 1]
    for path, words in bad_paths(tmp_path):
        start = time.monotonic()
        assert cli.main([a.format(path=path, saved=saved) for a in argv]) == EXIT_USAGE
        assert time.monotonic() - start < 1   # nothing probed, nothing inspected
        out, err = capsys.readouterr()
        assert_one_usage_line(err, out, f"{flag} {path}: {words}")


def test_json_to_stdout_stays_one_document(tmp_path, clean_env, capsys):
    import json

    assert cli.main(["local", "--json", "-"]) in (0, 1, 2)
    out, _ = capsys.readouterr()
    assert json.loads(out)["schema"] == "netcheck.report/1"


def test_a_refused_path_is_said_in_one_line_within_5_s_by_the_installed_command(tmp_path):
    """As a person runs it, a process start included: `python -m netcheck`, and `netcheck report`."""
    saved = saved_report(tmp_path)
    for argv in (["--rdzv", "127.0.0.1:1", "--json", str(tmp_path)],
                 ["--rdzv", "127.0.0.1:1", "--html", str(tmp_path / "missing" / "r.html")],
                 ["report", str(saved), "--html", str(tmp_path)]):
        start = time.monotonic()
        done = run_netcheck(*argv)
        took = time.monotonic() - start
        assert done.returncode == EXIT_USAGE, done.stderr
        assert_one_usage_line(done.stderr, done.stdout)
        assert took < USAGE_SECONDS, (argv, took)


# --- the small items: --traces, --rdzv "" ---------------------------------------------------------------


def test_inspect_traces_of_a_missing_folder_is_a_usage_error_not_a_finding(tmp_path, clean_env, capsys):
    missing = str(tmp_path / "no-such")
    assert cli.main(["inspect", "--traces", missing]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, f"--traces {missing!r}: no such folder")
    (tmp_path / "dump").write_text("x")
    assert cli.main(["inspect", "--traces", str(tmp_path / "dump")]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, f"--traces {str(tmp_path / 'dump')!r}: not a folder: give the folder the "
                          "ranks' dumps are in")


@pytest.mark.parametrize("argv, message", [
    (["--rdzv", ""], "--rdzv '': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    (["--rdzv", " "], "--rdzv ' ': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    (["--rdzv=", "--nnodes", "2"], "--rdzv '': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    (["inspect", "--rdzv", ""], "--rdzv '': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
    (["probe", ""], "netcheck probe '': the endpoint is empty: expected HOST:PORT or [IPV6]:PORT"),
])
def test_an_empty_endpoint_is_named_empty(argv, message, clean_env, capsys):
    clean_env.setenv("MASTER_ADDR", "elsewhere")   # an empty --rdzv is a mistake, not "use the environment's"
    assert cli.main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, message)


# --- as root: read-only places, immutable targets, another user's file, a place lost mid-run -----------


@contextmanager
def read_only_folder(folder: Path):
    """`folder` as a read-only bind mount of itself (read-only even for root), undone after."""
    folder.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@contextmanager
def immutable(path: Path):
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.root_required
def test_read_only_places_are_refused_in_one_line_within_5_s(tmp_path):
    """Places root cannot write either: a read-only mount, /proc and /sys, an immutable folder
    (chattr +i) and an immutable report (an archived one). Each flag, as a person runs it."""
    (tmp_path / "frozen").mkdir()
    (tmp_path / "kept.json").write_text("{}")
    with read_only_folder(tmp_path / "ro") as ro, immutable(tmp_path / "frozen"), immutable(tmp_path / "kept.json"):
        cases = [(ro / "r.out", f"the folder {ro} takes no new file (Read-only file system)"),
                 ("/proc/r.out", "the folder /proc takes no new file ("),
                 ("/sys/r.out", "the folder /sys takes no new file ("),
                 (tmp_path / "frozen" / "r.out", f"the folder {tmp_path}/frozen takes no new file (Operation not "
                                                 "permitted)"),
                 (tmp_path / "kept.json", "it is immutable or append-only (lsattr shows i or a; chattr -i -a "
                                          "clears them)")]
        for flag in FILE_FLAGS:
            for path, words in cases:
                start = time.monotonic()
                done = run_netcheck("--rdzv", "127.0.0.1:1", flag, str(path))
                took = time.monotonic() - start
                assert done.returncode == EXIT_USAGE, done.stderr
                assert_one_usage_line(done.stderr, done.stdout)
                assert done.stderr.startswith(f"netcheck: error: {flag} {path}: {words}"), done.stderr
                assert took < USAGE_SECONDS, (flag, path, took)
        assert leftovers(tmp_path) == leftovers(tmp_path / "frozen") == []
        assert (tmp_path / "kept.json").read_text() == "{}"


@pytest.mark.root_required
def test_another_user_s_report_in_a_sticky_folder_is_refused_before_the_run(tmp_path):
    """/tmp's rule: only a file's owner may replace it. Root's report.json there, and a user's
    run that names it: said at once, not found at the end."""
    sticky = Path(tempfile.mkdtemp(prefix="netcheck-test-sticky-"))   # beside /tmp's own, where nobody reaches
    try:
        sticky.chmod(0o1777)
        (sticky / "report.json").write_text("root's")
        hidden = tmp_path / "r.json"   # pytest's folder is root's own: nobody cannot reach it
        for path, words in ((sticky / "report.json", f"it belongs to another user (uid 0) in the sticky folder "
                                                     f"{sticky}, where only its owner may replace it"),
                            (hidden, f"the folder {tmp_path} cannot be reached (Permission denied)")):
            done = as_nobody([sys.executable, "-m", "netcheck", "--rdzv", "127.0.0.1:1", "--json", str(path)],
                             timeout=30)
            assert done.returncode == EXIT_USAGE, done.stderr
            assert_one_usage_line(done.stderr, done.stdout, f"--json {path}: {words}")
        assert (sticky / "report.json").read_text() == "root's"
    finally:
        shutil.rmtree(sticky)


def as_nobody(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`argv` run by the user nobody, as runuser runs it, with loopback of its own. Where this
    interpreter lives under root's private home (/root, mode 700), a mount namespace of the
    command's own shows that folder to nobody, and ends with the command."""
    home = Path("/root")
    inside = Path(sys.base_prefix)
    hidden = home in inside.parents and not os.stat(home).st_mode & stat.S_IXOTH
    hold = Path(os.environ.get("TMPDIR", "/tmp")) / f"netcheck-test-hold-{os.getpid()}"
    script = "mount --make-rprivate / && ip link set lo up && "
    if hidden:
        keep = inside.relative_to(home).parts[0]
        hold.mkdir()
        script += (f"mount --bind {home / keep} {hold} && mount -t tmpfs -o mode=755 tmpfs {home} && "
                   f"mkdir {home / keep} && mount --bind {hold} {home / keep} && ")
    script += 'exec runuser -u nobody -- "$@"'
    try:
        return subprocess.run(["unshare", "--mount", "--net", "--", "sh", "-c", script, "sh", *argv], cwd=REPO,
                              env=subprocess_env(), capture_output=True, text=True, timeout=timeout, **kwargs)
    finally:
        if hidden:
            hold.rmdir()


@pytest.mark.root_required
def test_a_place_lost_mid_run_keeps_the_text_report_and_exits_3(tmp_path):
    """The folder turns read-only while the host waits for a node: every file fails at the end,
    quiet or not the text report is printed whole, each file is named in one line, and the
    exit is 3, not the verdict: no gate reads a pass, or an earlier run's file, as this run's word."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_text("an earlier run's")
    port = free_port()
    files = {"--json": out / "r.json", "--exclude-file": out / "x.txt", "--prom": out / "n.prom",
             "--html": out / "r.html"}
    argv = [sys.executable, "-m", "netcheck", "--rdzv", f"127.0.0.1:{port}", "--nnodes", "2", "--node-rank", "0",
            "--only", "rendezvous", "--timeout", "15", "-q", *(a for f, p in files.items() for a in (f, str(p)))]
    proc = subprocess.Popen(argv, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_listening(port, proc, 30)
        with read_only_folder(out):
            stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == EXIT_INTERNAL, stderr
    assert "- verdict FAIL" in stdout and "phases: local" in stdout and "rdzv.join" in stdout   # the whole report
    lines = stderr.splitlines()
    assert lines == [f"netcheck: error: {flag} {path}: not written (Read-only file system); the report is the text "
                     "above" for flag, path in files.items()], stderr
    assert (out / "r.json").read_text() == "an earlier run's"
    assert sorted(os.listdir(out)) == ["r.json"]


def wait_listening(port: int, proc: subprocess.Popen, within: float) -> None:
    """Until the host listens on `port` (read from the kernel, nothing connects): the run is under way."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
               for c in psutil.Process(proc.pid).net_connections(kind="tcp")):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port} within {within} s")
