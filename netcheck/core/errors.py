"""netcheck's one error root, and where an error happened.

    NetcheckError       every exception class netcheck defines derives from it
      UserError         the user's to fix (a flag, a launcher's variable, a file given):
                        cli says it in one line and exits 64

Any other exception that reaches a phase's boundary or cli is netcheck's own (exit 3): its
finding or line names `where` it was raised, and --debug's log keeps its traceback.
"""

from __future__ import annotations

from types import TracebackType


class NetcheckError(Exception):
    """The root of netcheck's own exceptions."""


class UserError(NetcheckError):
    """An unusable command line or input the user gave: one line, exit 64."""


def described(error: BaseException) -> str:
    """'Type: message (at module:function:line)', on one line; the place where it is known."""
    message = " ".join(str(error).split())
    place = where(error)
    return f"{type(error).__name__}: {message}" + (f" (at {place})" if place else "")


def where(error: BaseException) -> str | None:
    """module:function:line of the innermost netcheck frame the error passed through (None when
    it carries no traceback): the place to look, even where a library raised it."""
    found = None
    frame: TracebackType | None = error.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        module = frame.tb_frame.f_globals.get("__name__", "")
        if module == "netcheck" or module.startswith("netcheck."):
            found = f"{module}:{code.co_name}:{frame.tb_lineno}"
        frame = frame.tb_next
    return found
