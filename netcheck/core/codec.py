"""JSON in and out, in one place.

Facts and findings are plain frozen dataclasses whose fields are str, int, float, bool,
None-able, tuple[X, ...], dict[str, X] or other such dataclasses. `to_plain` turns one into
JSON-ready values; `from_plain` rebuilds it from untrusted JSON, checking every field's
type, so nothing a peer sends reaches the rules unvalidated (and nothing is unpickled).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

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
    return _decode(cls, data, where)


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _decode_union(typing.get_args(tp), data, where)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_decode(item, v, f"{where}[{i}]") for i, v in enumerate(_expect(list, data, where)))
    if origin is dict:
        _, item = typing.get_args(tp)
        return {k: _decode(item, v, f"{where}.{k}") for k, v in _expect(dict, data, where).items()}
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, where)
    if tp is Any:
        return data
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if tp is type(None):
        if data is None:
            return None
        raise DecodeError(f"{where}: expected null, got {type(data).__name__}")
    return _expect(tp, data, where)


def _decode_union(options: tuple, data: Any, where: str) -> Any:
    errors = []
    for option in options:
        try:
            return _decode(option, data, where)
        except DecodeError as e:
            errors.append(str(e))
    raise DecodeError("; ".join(errors))


def _decode_dataclass(cls: type, data: Any, where: str) -> Any:
    data = _expect(dict, data, where)
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError(f"{where}: missing field {f.name!r}")
    return cls(**values)


def _expect(tp: type, data: Any, where: str) -> Any:
    # bool is an int in Python; a peer sending true where a count belongs is malformed.
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise DecodeError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
    return data
