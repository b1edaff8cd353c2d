"""JSON in and out, in one place.

Facts and findings are plain frozen dataclasses whose fields are str, int, float, bool,
None-able, tuple[X, ...], dict[str, X] or other such dataclasses. `to_plain` turns one into
JSON-ready values; `from_plain` rebuilds it from untrusted JSON, checking every field's
type, so nothing a peer sends reaches the rules unvalidated (and nothing is unpickled).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types
import typing
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class DecodeError(ValueError):
    """Received JSON that does not have the expected shape.

    The message quotes what was received (keys, types), so control characters in it are
    escaped: it must stay one line in a report or on a terminal.
    """

    def __init__(self, message: str):
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


def small_int(text: str | bytes) -> int | None:
    """A count or id a peer wrote as text: ASCII digits only, at most 9 ("²".isdigit() is
    true and int() refuses it; int() refuses thousands of digits too); None otherwise."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(to_plain(value), indent=indent, sort_keys=False)


def loads(cls: type[T], text: str | bytes, max_bytes: int) -> T:
    size = len(text)
    if isinstance(text, str) and size <= max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))  # the limit is in bytes, not characters
    if size > max_bytes:
        raise DecodeError(f"{size} bytes, over the {max_bytes}-byte limit")
    try:
        data = json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:
        raise DecodeError("not JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an over-long integer
        raise DecodeError(f"not JSON: {e}") from None
    return from_plain(cls, data)


def _not_json(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has neither, and NaN passes every threshold.
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is out of range")
    return value


def from_plain(cls: type[T], data: Any, where: str = "$") -> T:
    return _decoder(cls)(data, where)


# A decoder per type, built once: the host decodes thousands of records of a few types.
# `where` (the path to the value, for the error message) is built only when one is raised:
# a path is "$" or a (parent path, ".field" or list index) pair.
Where = Any


def _path(where: Where) -> str:
    parts = []
    while isinstance(where, tuple):
        where, suffix = where
        parts.append(f"[{suffix}]" if isinstance(suffix, int) else suffix)
    return where + "".join(reversed(parts))


@functools.cache
def _decoder(tp: Any) -> Callable[[Any, Where], Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(typing.get_args(tp))
    if origin is tuple:
        item = _decoder(typing.get_args(tp)[0])
        return lambda data, where: tuple(item(v, (where, i)) for i, v in enumerate(_expect(list, data, where)))
    if origin is dict:
        item = _decoder(typing.get_args(tp)[1])
        return lambda data, where: {k: item(v, (where, "." + k)) for k, v in _expect(dict, data, where).items()}
    if dataclasses.is_dataclass(tp):
        return functools.partial(_decode_dataclass, tp)
    if tp is Any:
        return lambda data, where: data
    if tp is float:
        return _decode_float
    if tp is type(None):
        return _decode_none
    return lambda data, where: _expect(tp, data, where)


def _decode_float(data: Any, where: Where) -> float:
    if isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return _expect(float, data, where)


def _decode_none(data: Any, where: Where) -> None:
    if data is None:
        return None
    raise DecodeError(f"{_path(where)}: expected null, got {type(data).__name__}")


def _union_decoder(options: tuple) -> Callable[[Any, Where], Any]:
    decoders = [_decoder(o) for o in options]
    nullable = type(None) in options

    def decode(data: Any, where: Where) -> Any:
        if data is None and nullable:
            return None
        errors = []
        for d in decoders:
            try:
                return d(data, where)
            except DecodeError as e:
                errors.append(str(e))
        raise DecodeError("; ".join(errors))
    return decode


@functools.cache
def _fields_of(cls: type) -> tuple[tuple[str, str, Callable[[Any, Where], Any], bool], ...]:
    """(name, its path suffix, decoder, required) per field."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, "." + f.name, _decoder(hints[f.name]),
                  f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                 for f in dataclasses.fields(cls))


def _decode_dataclass(cls: type, data: Any, where: Where) -> Any:
    data = _expect(dict, data, where)
    values = {}
    for name, suffix, decode, required in _fields_of(cls):
        if name in data:
            values[name] = decode(data[name], (where, suffix))
        elif required:
            raise DecodeError(f"{_path(where)}: missing field {name!r}")
    return cls(**values)


def _expect(tp: type, data: Any, where: Where) -> Any:
    # bool is an int in Python; a peer sending true where a count belongs is malformed.
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise DecodeError(f"{_path(where)}: expected {tp.__name__}, got {type(data).__name__}")
    return data
