"""Text a person reads holds no character a terminal acts on or hides.

Strings from peers, the store and the environment end up in the text report and on stderr: a
newline there would start a line netcheck never wrote (a green "PASS"), an ESC would recolour
or rewrite the screen, a bidi override would reorder what is shown, and a lone surrogate
cannot be written at all. Every character that is not printable (str.isprintable: the C0 and
C1 controls, DEL, line and paragraph separators, format characters such as the bidi
controls, surrogates, unassigned code points, spaces other than " ") is shown as its Python
escape instead:

    printable("gpu01\\n\\x1b[32mPASS")  ->  "gpu01\\x0a\\x1b[32mPASS"
    printable("a\\u202eb")             ->  "a\\u202eb"  (the six characters, not the override)

The JSON report keeps every string exact; this is for text only.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")


def printable(text: str) -> str:
    """text, each character that is not printable replaced by its escape (\\x1b, \\u2028, \\udc80)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable_copy(value: T) -> T:
    """A copy of a record (dataclasses, tuples, lists, dicts) with every string in it, keys
    included, made printable. Rendering from the copy keeps a peer's newline from ever
    meeting the renderer's own, whatever field it arrives in."""
    if isinstance(value, str):
        return printable(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value)(**{f.name: printable_copy(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, (tuple, list)):
        return type(value)(printable_copy(v) for v in value)
    if isinstance(value, dict):
        return {printable_copy(k): printable_copy(v) for k, v in value.items()}
    return value
