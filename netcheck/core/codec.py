"""JSON in and out, in one place.

Facts and findings are plain frozen dataclasses whose fields are str, int, float, bool,
None-able, tuple[X, ...], tuple[X, Y], dict[str, X] or other such dataclasses, each of
which may be Annotated with the ranges of netcheck.core.fields. `to_plain` turns one into
JSON-ready values; `from_plain` rebuilds it from untrusted JSON, checking every field's type
and range, so nothing a peer sends reaches the rules unvalidated (and nothing is unpickled).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from typing import Any, Callable, TypeVar

from netcheck.core import fields
from netcheck.core.constants import MAX_NODES
from netcheck.core.errors import NetcheckError

T = TypeVar("T")


class DecodeError(NetcheckError, ValueError):
    """Received JSON that does not have the expected shape.

    The message quotes what was received (keys, types), so control characters in it are
    escaped: it must stay one line in a report or on a terminal.
    """

    def __init__(self, message: str):
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))


def to_plain(value: Any) -> Any:
    kind: type = type(value)
    if kind in _SCALARS:  # the most of any record, and a host's report of 4,096 nodes holds 600,000 values
        return value
    names = field_names(kind)
    if names is not None:
        return {name: to_plain(getattr(value, name)) for name in names}
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


_SCALARS = frozenset((str, int, float, bool, type(None)))


@functools.cache
def field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass's field names (None: not one); dataclasses.fields() per value cost the
    host a second of a 4,096-node report."""
    return tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else None


def small_int(text: str | bytes) -> int | None:
    """A count or id a peer wrote as text, as fields.is_whole_number allows it; None otherwise."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    return int(text) if fields.is_whole_number(text) else None


def dumps(value: Any, indent: int | None = None) -> str:
    """JSON text; with `indent`, containers to INDENTED_LEVELS deep each item on its own line and
    deeper ones on one (an evidence line, a table row, a node's facts field a line each)."""
    plain = to_plain(value)
    return _one_line(plain) if indent is None else _indented(plain, indent, 0)


# Python's indenting encoder is pure Python: a 4,096-node report took 0.65 s to write fully
# indented, 0.32 s so (its one-line encoder is C).
INDENTED_LEVELS = 4


def _one_line_encoder() -> Callable[[Any], str]:
    """json.JSONEncoder().encode, its C encoder made once rather than per call: a report of
    100,000 ranks encodes a few million values one at a time, each call half setup. The
    arguments are json's own for a default encoder, check_circular aside (plain values
    from to_plain hold no cycle); json without its C part falls back to encode."""
    plain = json.JSONEncoder()
    make = getattr(json.encoder, "c_make_encoder", None)   # not in its stubs: the C accelerator
    if make is None:
        return plain.encode
    encode = make(None, plain.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    return lambda value: "".join(encode(value, 0))


_one_line = _one_line_encoder()


def _indented(value: Any, indent: int, level: int) -> str:
    if level >= INDENTED_LEVELS or not value or not isinstance(value, (dict, list)):
        return _one_line(value)
    pad, close = " " * (indent * (level + 1)), " " * (indent * level)
    if isinstance(value, dict):
        items = [f"{pad}{_one_line(k)}: {_indented(v, indent, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{close}}}"
    return "[\n" + ",\n".join(pad + _indented(v, indent, level + 1) for v in value) + f"\n{close}]"


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
    kind: type = cls   # a class is hashable (functools.cache's key), which mypy does not see of type[T]
    return _decoder(kind)(data, where)


# A decoder per type, built once: the host decodes thousands of records of a few types.
# `where` (the path to the value, for the error message) is built only when one is raised:
# a path is "$" or a (parent path, ".field" or list index) pair.
Where = Any
Decoder = Callable[[Any, Where], Any]

# Not in a str that is not fields.Text: C0, DEL and C1 controls (tab and newline included:
# a name or an id has none), line and paragraph separators (str.splitlines breaks lines at
# them), and the bidirectional overrides that reorder a line on a terminal.
_UNPRINTED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# JSON's \ud800 escapes make lone surrogates, which no encoder will write out.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _path(where: Where) -> str:
    parts = []
    while isinstance(where, tuple):
        where, suffix = where
        parts.append(f"[{suffix}]" if isinstance(suffix, int) else _shortened(suffix))
    return where + "".join(reversed(parts))


def _shortened(part: str) -> str:
    """A path's part, which may be a received key: as short as fields.shown quotes a value."""
    return part if len(part) <= fields.SHOWN_CHARS else part[:fields.SHOWN_CHARS] + "..."


@functools.cache
def _decoder(tp: Any) -> Decoder:
    """tp's decoder; Annotated[X, ...] is X's, held to the rules it declares (fields.Rule:
    Range, Check...) and shaped by fields.Items and fields.FreeText."""
    if typing.get_origin(tp) is not typing.Annotated:
        return _shaped(tp, fields.MAX_ITEMS, free_text=False)
    meta = tp.__metadata__
    most = next((m.most for m in meta if isinstance(m, fields.Items)), fields.MAX_ITEMS)
    decode = _shaped(typing.get_args(tp)[0], most, any(isinstance(m, fields.FreeText) for m in meta))
    rules = tuple(m for m in meta if hasattr(m, "why_not"))
    decode = _ruled(decode, rules) if rules else decode
    return _remembered(decode) if any(isinstance(m, fields.Shared) for m in meta) else decode


def _remembered(decode: Decoder) -> Decoder:
    """decode, once per distinct value: the host of 12,500 torchrun nodes of 8 reads each node's
    interfaces 8 times, and its cluster's environment 100,000 times. The value's one-line JSON
    (C-encoded, a fraction of decoding it) is the key; what decoding refused is never kept, so
    its error still names its own path. At most SHARED_KEPT values: then it starts again."""
    kept: dict[str, Any] = {}

    def decode_once(data: Any, where: Where) -> Any:
        try:
            key = _one_line(data)
        except (TypeError, ValueError):   # not JSON's (a caller's own value): decoding says why
            return decode(data, where)
        value = kept.get(key, _UNSEEN)
        if value is _UNSEEN:
            value = decode(data, where)
            if len(kept) >= SHARED_KEPT:
                kept.clear()
            kept[key] = value
        return value
    return decode_once


_UNSEEN = object()
SHARED_KEPT = MAX_NODES   # one value per node at the largest cluster


def _shaped(tp: Any, most: int, free_text: bool) -> Decoder:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        # Annotated[list | None, PER_NODE]: the bound is the list's, not lost to the generic one.
        return _union_decoder(tuple(_decoder(o) if typing.get_origin(o) is typing.Annotated
                                    else _shaped(o, most, free_text) for o in typing.get_args(tp)),
                              type(None) in typing.get_args(tp))
    if origin is tuple:
        return _tuple_decoder(typing.get_args(tp), most)
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        return _dict_decoder(key_type, value_type, most)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if tp is str:
        return _decode_text if free_text else _decode_str
    if tp is int:
        return _decode_int
    if tp is float:
        return _decode_float
    if tp is type(None):
        return _decode_none
    return lambda data, where: _expect(tp, data, where)


def _ruled(decode: Decoder, rules: tuple[fields.Rule, ...]) -> Decoder:
    # A rule's bare test first (a range's comparison, a check's function): the host checks a
    # million fields at 100,000 ranks, and only a refused value needs its message made.
    tests = tuple(getattr(rule, "accepts", None) or (lambda value, rule=rule: rule.why_not(value) is None)
                  for rule in rules)
    test = tests[0] if len(tests) == 1 else lambda value: all(t(value) for t in tests)

    def checked(data: Any, where: Where) -> Any:
        value = decode(data, where)
        if test(value):
            return value
        for rule in rules:
            why = rule.why_not(value)
            if why is not None:
                raise DecodeError(f"{_path(where)}: {why}")
        return value
    return checked


def _tuple_decoder(args: tuple, most: int) -> Decoder:
    if args[-1] is Ellipsis:
        return _items_decoder(args[0], most)
    items = tuple(_decoder(a) for a in args)  # tuple[A, B]: one of each, in order
    return lambda data, where: tuple(
        d(v, (where, i)) for i, (d, v) in enumerate(zip(items, _sized(list, data, where, len(items), len(items)))))


def _items_decoder(tp: Any, most: int) -> Decoder:
    """tuple[tp, ...]'s decoder: the list kept whole where every item passes tp's fast test
    (_kept_test: a node's addresses, its lookups' answers), each item decoded otherwise."""
    item, kept = _decoder(tp), _kept_test(tp)
    scope, each = {"_sized": _sized, "item": item}, "tuple([item(v, (where, i)) for i, v in enumerate(data)])"
    lines = ["def items(data, where):", f"data = _sized(list, data, where, 0, {most!r})"]
    if kept is None:
        return _compiled("items", lines + [f"return {each}"], scope, f"<decoder of {tp}>")
    return _compiled("items", lines + ["for v in data:",
                                       f"    if not ({kept.expression.format(v='v', check='check')}):",
                                       f"        return {each}", "return tuple(data)"],
                     {**scope, "check": kept.check}, f"<decoder of {tp}>")


def _dict_decoder(key_type: Any, value_type: Any, most: int) -> Decoder:
    """dict[key_type, value_type]'s decoder: a copy of the object where every key and value
    passes its type's fast test (a launch's variables, a node's settings), each decoded otherwise."""
    kept_key, kept_value = _kept_test(key_type), _kept_test(value_type)
    scope = {"_sized": _sized, "key": _decoder(key_type), "value": _decoder(value_type)}
    each = '{key(k, (where, "." + k)): value(v, (where, "." + k)) for k, v in data.items()}'
    lines, name = ["def entries(data, where):", f"data = _sized(dict, data, where, 0, {most!r})"], \
        f"<decoder of dict[{key_type}, {value_type}]>"
    if kept_key is None or kept_value is None:
        return _compiled("entries", lines + [f"return {each}"], scope, name)
    return _compiled("entries", lines + ["for k, v in data.items():",
                                         f"    if not ({kept_key.expression.format(v='k', check='check_key')}) or "
                                         f"not ({kept_value.expression.format(v='v', check='check_value')}):",
                                         f"        return {each}", "return dict(data)"],
                     {**scope, "check_key": kept_key.check, "check_value": kept_value.check}, name)


def _compiled(name: str, lines: list[str], scope: dict[str, Any], filename: str) -> Any:
    """The function `name` that these lines (its def, then its body's) define, with these names
    in reach: a decoder written out for one type, as dataclasses writes an __init__."""
    namespace = {**scope, "isfinite": math.isfinite}   # _kept_test's expressions call it
    exec(compile("\n    ".join(lines), filename, "exec"), namespace)
    return namespace[name]


def _sized(tp: type, data: Any, where: Where, least: int, most: int) -> Any:
    data = _expect(tp, data, where)
    if not least <= len(data) <= most:
        bound = f"exactly {most}" if least == most else f"at most {most}"
        raise DecodeError(f"{_path(where)}: {len(data)} items, expected {bound}")
    return data


def _decode_str(data: Any, where: Where) -> str:
    if type(data) is str and data.isascii() and data.isprintable():   # the most of them, at C speed
        return data
    data = _decode_text(data, where)
    bad = _UNPRINTED.search(data)
    if bad:
        raise DecodeError(f"{_path(where)}: {fields.shown(data)} holds a control character "
                          f"({bad[0]!r} at {bad.start()})")
    return data


def _decode_text(data: Any, where: Where) -> str:
    if type(data) is str and data.isascii():   # no surrogate in it
        return data
    data = _expect(str, data, where)
    bad = _SURROGATE.search(data)
    if bad:
        raise DecodeError(f"{_path(where)}: {fields.shown(data)} is not valid Unicode "
                          f"(a lone surrogate at {bad.start()})")
    return data


def _decode_int(data: Any, where: Where) -> int:
    if type(data) is int and fields.MIN_INT <= data <= fields.MAX_INT:   # not a bool: its type is bool
        return data
    return _int64(_expect(int, data, where), where)


def _decode_float(data: Any, where: Where) -> float:
    if type(data) is float and math.isfinite(data):
        return data
    if isinstance(data, int) and not isinstance(data, bool):
        return float(_int64(data, where))  # float() of a 400-digit integer overflows
    data = _expect(float, data, where)
    if not math.isfinite(data):  # from_plain's callers may hand over what JSON cannot hold
        raise DecodeError(f"{_path(where)}: {data} is not a finite number")
    return data


def _int64(value: int, where: Where) -> int:
    if fields.MIN_INT <= value <= fields.MAX_INT:
        return value
    raise DecodeError(f"{_path(where)}: {fields.shown(value)} does not fit in 64 bits")


def _decode_none(data: Any, where: Where) -> None:
    if data is None:
        return None
    raise DecodeError(f"{_path(where)}: expected null, got {type(data).__name__}")


def _union_decoder(decoders: tuple[Decoder, ...], nullable: bool) -> Decoder:
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
def _dataclass_decoder(cls: type) -> Decoder:
    """cls's decoder, written out a field at a time as dataclasses writes an __init__: a loop
    over the fields, each unpacked from a tuple, a call to test it and a keyword argument, cost
    the host a third of its decoding at 100,000 ranks. Each field's value is kept where its
    fast test passes (_kept_test, written in line), decoded otherwise; an absent one takes its
    default or is named missing."""
    scope: dict[str, Any] = {"cls": cls, "_expect": _expect, "_path": _path, "DecodeError": DecodeError,
                             "_ABSENT": _ABSENT}
    hints, body, fields_ = typing.get_type_hints(cls, include_extras=True), [], dataclasses.fields(cls)
    for i, f in enumerate(fields_):
        v = f"v{i}"
        scope[f"decode{i}"] = _decoder(hints[f.name])
        if f.default is not dataclasses.MISSING:
            scope[f"default{i}"], absent = f.default, f"{v} = default{i}"
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"factory{i}"], absent = f.default_factory, f"{v} = factory{i}()"
        else:
            absent = f"raise DecodeError(_path(where) + {f': missing field {f.name!r}'!r})"
        kept = _kept_test(hints[f.name])
        if kept is not None:
            scope[f"check{i}"] = kept.check
        body += [f"{v} = get({f.name!r}, _ABSENT)", f"if {v} is _ABSENT:", f"    {absent}",
                 f"elif not ({kept.expression.format(v=v, check=f'check{i}')}):" if kept else "else:",
                 f"    {v} = decode{i}({v}, (where, {'.' + f.name!r}))"]
    # Every field is an __init__ argument (no record has init=False), in order; a keyword-only one by name.
    arguments = ", ".join(f"{f.name}=v{i}" if f.kw_only else f"v{i}" for i, f in enumerate(fields_))
    return _compiled("decode", ["def decode(data, where):", "if type(data) is not dict:",
                                "    data = _expect(dict, data, where)", "get = data.get", *body,
                                f"return cls({arguments})"],
                     scope, f"<decoder of {cls.__qualname__}>")


_ABSENT = object()


class _Passed(set):
    """A check's test, the short texts it passed kept: `text in it` is a lookup at C speed,
    `it(text)` the test. A node's interface names, addresses and hostname recur in every record
    that names it: a million checks at 100,000 ranks, most of them of texts seen before. At
    most SHARED_KEPT texts of PASSED_CHARS each; then it starts again."""

    def __init__(self, test: Callable[[str], bool]):
        super().__init__()
        self.test = test

    def __call__(self, text: str) -> bool:
        if not self.test(text):
            return False
        if len(text) <= PASSED_CHARS:
            if len(self) >= SHARED_KEPT:
                self.clear()
            self.add(text)
        return True


PASSED_CHARS = 64   # an interface name, an address, a short hostname


@dataclasses.dataclass(frozen=True)
class KeptTest:
    """A Python expression over {v}, passing only scalars a field's decoder would return
    unchanged; {check} names the field's Check test where it calls one (_Passed)."""

    expression: str
    check: Callable[[Any], bool] | None = None


@functools.cache
def _kept_test(tp: Any) -> KeptTest | None:
    """The test a value of tp may skip its decoder by (None: every value goes to it): an ASCII
    printable str within its rules, an int or finite float in range, null where allowed.
    Everything else, and every value it fails, goes to the decoder, which decides and names
    what is wrong. The host decodes a few million fields at 100,000 ranks, most of them
    through four calls each without this."""
    meta: tuple = ()
    if typing.get_origin(tp) is typing.Annotated:
        meta, tp = tp.__metadata__, typing.get_args(tp)[0]
    nullable = typing.get_origin(tp) in (typing.Union, types.UnionType)
    if nullable:
        args = typing.get_args(tp)
        if len(args) != 2 or type(None) not in args:
            return None
        tp = next(a for a in args if a is not type(None))
        if typing.get_origin(tp) is typing.Annotated:   # Optional[Annotated[...]]: its own rules
            meta, tp = meta + tp.__metadata__, typing.get_args(tp)[0]
    rules = [m for m in meta if hasattr(m, "why_not")]
    if any(isinstance(m, (fields.Shared, fields.Items)) for m in meta) or len(rules) > 1:
        return None
    test = _scalar_test(tp, any(isinstance(m, fields.FreeText) for m in meta), rules[0] if rules else None)
    if test is None or not nullable:
        return test
    return dataclasses.replace(test, expression=f"{{v}} is None or ({test.expression})")


def _scalar_test(tp: Any, free: bool, rule: Any) -> KeptTest | None:
    if isinstance(rule, fields.Range) and tp in (int, float):
        low, high = rule.low, rule.high
        if tp is int:
            low, high = max(low, fields.MIN_INT), min(high, fields.MAX_INT)
            return KeptTest(f"type({{v}}) is int and {low!r} <= {{v}} <= {high!r}")
        if math.isfinite(low) and math.isfinite(high):
            return KeptTest(f"type({{v}}) is float and {float(low)!r} <= {{v}} <= {float(high)!r}")
        return None
    if rule is not None and not isinstance(rule, fields.Check):
        return None
    check = _Passed(rule.test) if rule is not None else None
    called = " and ({v} in {check} or {check}({v}))" if check is not None else ""
    if tp is str:
        printable = "" if free else " and {v}.isprintable()"
        return KeptTest("type({v}) is str and {v}.isascii()" + printable + called, check)
    if check is not None:
        return None
    if tp is int:
        return KeptTest(f"type({{v}}) is int and {fields.MIN_INT!r} <= {{v}} <= {fields.MAX_INT!r}")
    if tp is float:
        return KeptTest("type({v}) is float and isfinite({v})")
    if tp is bool:
        return KeptTest("type({v}) is bool")
    return None


def _expect(tp: type, data: Any, where: Where) -> Any:
    # bool is an int in Python; a peer sending true where a count belongs is malformed.
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise DecodeError(f"{_path(where)}: expected {tp.__name__}, got {type(data).__name__}")
    return data
