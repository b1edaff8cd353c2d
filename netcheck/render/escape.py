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

from typing import Any, Iterable, TypeVar

from netcheck.core.codec import field_names

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
    included, made printable; the record itself where nothing in it needed it (read it, never
    change it). Rendering from the copy keeps a peer's newline from ever
    meeting the renderer's own, whatever field it arrives in. What holds nothing to escape
    is returned itself, not rebuilt: a 4,096-node report spent half a second being copied
    for a text of 57 lines. A part several records hold (the cluster's environment, held by
    every node's entry) is copied once."""
    return _copy(value, {})


def _copy(value: Any, done: dict[int, Any]) -> Any:
    """printable_copy's work: each kind of value copied as its own type (T in, T out); done
    holds each container copied so far by its id (the record outlives the copy)."""
    kind: type = type(value)
    if kind is str:
        return printable(value)
    if kind in _UNESCAPED:   # a report of 100,000 ranks holds a few million
        return value
    if id(value) in done:
        return done[id(value)]
    if isinstance(value, str):   # a subclass of str
        return printable(value)
    if not isinstance(value, type) and (names := field_names(kind)) is not None:   # a dataclass
        fields = [getattr(value, name) for name in names]
        copied = [_copy(f, done) for f in fields]
        made = value if _same(fields, copied) else type(value)(**dict(zip(names, copied)))
    elif isinstance(value, (tuple, list)):
        copied = [_copy(v, done) for v in value]
        made = value if _same(value, copied) else type(value)(copied)
    elif isinstance(value, dict):
        entries = {_copy(k, done): _copy(v, done) for k, v in value.items()}
        unchanged = len(entries) == len(value) and _same(value, entries) and _same(value.values(), entries.values())
        made = value if unchanged else entries
    else:
        return value
    done[id(value)] = made
    return made


_UNESCAPED = frozenset((int, float, bool, type(None)))


def _same(before: Iterable, after: Iterable) -> bool:
    return all(a is b for a, b in zip(before, after))
