"""cli's words as a new user reads them (issue 53): the usage line names the sub-commands,
every sub-command's output flag says what it writes, a mistake names what the user typed, and
`netcheck report --html` alone says where the page went."""

from __future__ import annotations

import re

import pytest

from html_reports import cluster_report
from netcheck import cli
from netcheck.core.constants import EXIT_BY_VERDICT, EXIT_USAGE
from netcheck.render.html import render_html
from netcheck.render.text import render_json
from test_cli import assert_one_usage_line

SUBCOMMANDS = ("local", "probe", "inspect", "checks", "report")


def test_the_usage_line_names_every_sub_command(capsys):
    usage = cli.build_parser().format_usage()
    assert all(re.search(rf"\b{name}\b", usage) for name in SUBCOMMANDS), usage
    with pytest.raises(SystemExit):
        cli.main(["-h"])
    assert capsys.readouterr().out.startswith("usage: " + usage.removeprefix("usage: ").rstrip())


@pytest.mark.parametrize("command, flags", [("local", ("--json",)), ("probe", ("--json",)),
                                            ("inspect", ("--json", "--prom")), ("report", ("--html",))])
def test_every_sub_commands_output_flag_says_what_it_writes(command, flags, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "-h"])
    assert done.value.code == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    for flag in flags:
        assert re.search(rf"{flag} \S+ write ", text), (flag, text)


@pytest.mark.parametrize("endpoint, message", [
    (":", "netcheck probe ':': expected HOST:PORT or [IPV6]:PORT"),
    ("node0:99999", "netcheck probe 'node0:99999': port 99999 is outside 1-65535"),
])
def test_probe_names_its_own_argument_not_a_flag_the_user_did_not_give(endpoint, message, capsys):
    assert cli.main(["probe", endpoint]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert_one_usage_line(err, out, message)
    assert "--rdzv" not in err


def test_report_with_html_alone_says_where_it_wrote(tmp_path, capsys):
    report = cluster_report(3)
    saved, page = tmp_path / "report.json", tmp_path / "report.html"
    saved.write_text(render_json(report))
    assert cli.main(["report", str(saved), "--html", str(page)]) == EXIT_BY_VERDICT[report.verdict]
    out, err = capsys.readouterr()
    assert out == "" and err == f"netcheck: the HTML report is in {page}\n"
    assert page.read_text(encoding="utf-8") == render_html(report)
