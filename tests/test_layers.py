"""A module is read whole: past MAX_LINES it says why at its top, in a docstring line that starts
with REASON (a module that shrank back under the bound drops the line)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "netcheck"
MAX_LINES = 500
REASON = "Longer than 500 lines:"


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def says_why(source: str) -> bool:
    """Whether the module's docstring has a line starting with REASON and saying something."""
    docstring = ast.get_docstring(ast.parse(source)) or ""
    return any(line.startswith(REASON) and line[len(REASON):].strip() for line in docstring.splitlines())


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_module_over_the_bound_says_why_at_its_top(path):
    source = path.read_text()
    lines = len(source.splitlines())
    assert says_why(source) == (lines > MAX_LINES), (
        f"{lines} lines: say why in a docstring line starting {REASON!r}" if lines > MAX_LINES
        else f"{lines} lines: no longer past the bound, drop its {REASON!r} line")


def test_the_reason_is_read_from_the_docstring_alone():
    assert says_why(f'"""What it does.\n\n{REASON} one table, read top to bottom."""\n')
    assert not says_why(f'"""What it does.\n\n{REASON}"""\n')             # a reason, not the words
    assert not says_why(f'"""What it does."""\n# {REASON} a comment\n')   # at its top, in the docstring
    assert not says_why(f'x = 1\n"""{REASON} not a docstring"""\n')
