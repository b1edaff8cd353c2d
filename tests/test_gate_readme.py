"""The README's "Wire it into your launcher": every command its examples quote is checked against
the real tool. A netcheck command's flags are in that sub-command's --help; sbatch's options in
real sbatch's --help (the arguments after the script are netcheck's); slurm.conf's keys in
Slurm's own slurm.conf(5), its program a script shipped here; promtool's command is run; the
label script's flags are in its --help, and the kubectl line is the one it prints (which
tests/test_gate_labels.py checks from real runs). A command no rule here knows fails the test,
so an example added later is checked or noticed."""

from __future__ import annotations

import gzip
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from prom import PROMTOOL, require

REPO = Path(__file__).parents[1]
SECTION = "### Wire it into your launcher"
SLURM_CONF_MAN = Path("/usr/share/man/man5/slurm.conf.5.gz")
SEPARATORS = {"|", ";", "&&", "||"}


def section() -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index(SECTION)
    return readme[start:readme.index("\n### ", start + 1)]


def examples() -> list[list[str]]:
    """Each simple command of the section's code blocks (indented four spaces), as argv."""
    commands: list[list[str]] = []
    for line in re.findall(r"^    (\S.*)$", section(), re.M):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv: list[str] = []
        for token in [*lexer, ";"]:
            if token in SEPARATORS:
                commands += [argv] if argv else []
                argv = []
            else:
                argv.append(token)
    return commands


def help_text(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert done.returncode == 0, done
    return done.stdout


def flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("-")]


def check_netcheck(args: list[str]) -> None:
    sub = args[:1] if args[:1] in (["local"], ["probe"], ["inspect"], ["report"]) else []
    text = help_text([sys.executable, "-m", "netcheck", *sub])
    assert all(re.search(rf"(^|[\s,\[]){re.escape(f)}\b", text, re.M) for f in flags(args)), (args, text)


def check_sbatch(args: list[str], tmp_path: Path) -> None:
    """Real sbatch's options (it reads a slurm.conf before it answers --help); the script shipped,
    the rest netcheck's."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=readme\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    script = next(i for i, a in enumerate(args) if not a.startswith("-"))
    text = help_text(["sbatch"], {"SLURM_CONF": str(conf)})
    assert all(re.search(rf"\s{re.escape(f)}[=\s]", text) for f in flags(args[:script])), (args, text)
    assert (REPO / args[script]).is_file(), args
    check_netcheck(args[script + 1:])


def check_slurm_conf(setting: str) -> None:
    """A key slurm.conf(5) documents; a program it names is a script of ours (installed under
    its own name), an interval a number of seconds."""
    key, value = setting.split("=", 1)
    with gzip.open(SLURM_CONF_MAN, "rt", errors="replace") as man:
        assert f"\n.TP\n\\fB{key}\\fR\n" in man.read(), key
    assert (REPO / "scripts" / Path(value).name).is_file() if key in ("HealthCheckProgram", "Prolog") \
        else value.isdigit(), setting


def check_labels(args: list[str]) -> None:
    script = REPO / args[0]
    assert script.is_file(), args
    text = help_text([sys.executable, str(script)])
    assert all(f in text for f in flags(args[1:])), (args, text)


def check_kubectl(args: list[str]) -> None:
    line = shlex.join(["kubectl", *args])
    assert re.fullmatch(r"kubectl label node \S+ --overwrite netcheck/at-fault=true netcheck/check=[a-z_.]+ "
                        r"netcheck/valid-until=\d+", line), line


def test_the_section_quotes_each_launchers_example():
    tools = {argv[0].split("=")[0] for argv in examples()}
    assert tools >= {"HealthCheckProgram", "HealthCheckInterval", "sbatch", "netcheck", "python3", "kubectl",
                     "promtool"}, tools


@pytest.mark.parametrize("argv", examples(), ids=shlex.join)
def test_every_command_the_section_quotes_is_what_the_real_tool_takes(argv, tmp_path):
    tool, args = argv[0], argv[1:]
    if re.fullmatch(r"[A-Za-z]+=\S+", tool) and not args:
        check_slurm_conf(tool)
    elif tool == "netcheck":
        check_netcheck(args)
    elif tool == "sbatch":
        check_sbatch(args, tmp_path)
    elif tool == "promtool":
        done = subprocess.run([require(PROMTOOL, "promtool"), *args], cwd=REPO, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done
    elif tool == "python3":
        check_labels(args)
    elif tool == "kubectl":
        check_kubectl(args)
    else:
        assert argv == ["sh"], f"an example no rule here checks: {argv}"
