"""The bounded decoder for the pickles netcheck reads from a job's store: torchrun's
rendezvous state. (Flight-recorder dumps, megabytes each and a thousand at once, are decoded
by the C unpickler with every global refused, in limited child processes: facts.frdecode.)
Longer than 500 lines: one state machine, each opcode beside the bound it keeps; split, an
opcode would be read apart from its check.

pickle.Unpickler cannot be bounded from outside: a memo index allocates before anything is
checked, nested values recurse in C, colliding keys cost quadratic time, and BUILD reaches
whatever object a global names, classes included. So the opcode stream is walked here and
every object built here: only the opcodes CPython's pickler writes for plain data at
protocols 2 to 5, only the globals the caller admits, every limit checked before the object
it bounds exists, and no recursion, so no input reaches Python's own limits.

    >>> decode(pickle.dumps({"ranks": [0, 1]}, protocol=4), {})
    {'ranks': [0, 1]}

A class the format holds is admitted as a RecordClass (NEWOBJ makes a fresh Record, BUILD
fills it once with its fields); a callable as a Factory (REDUCE calls its checked
constructor); DATETIMES admits datetime's three types. Sets, frozensets and protocol 2's
bytes (builtins.set, builtins.frozenset, builtins.bytes, _codecs.encode) are always admitted,
checked. Whatever is refused raises ForeignPickle, a ValueError with a one-line message; what asks for
code (a global not admitted, a persistent id, an extension code, BUILD on a class) raises
HostilePickle, its subclass. No other exception leaves decode().
"""

from __future__ import annotations

import calendar
import datetime
import pickletools
import re
import struct
import sys
import types
from dataclasses import dataclass
from typing import Callable, Mapping, Sized, TypeGuard, TypeVar

from netcheck.core.deadline import Deadline
from netcheck.core.errors import NetcheckError

T = TypeVar("T")

# The limits, each checked before what it bounds is built. A c10d rendezvous state of
# 10,000 nodes takes, at protocol 2 (the most verbose), 322,000 opcodes, 80,000
# memo entries and 40,000 containers, nesting 6 deep, 10,000 items in its largest dict; at
# protocols 4 and 5, 262,000 opcodes and 60,000 memo entries. The limits leave about three
# times that. At them the worst input (a million short strings) costs 70 MB and about 1.5 s
# on a busy 2-core machine (tests/test_pickled.py measures every flood).
MAX_PICKLE_BYTES = 16 << 20
MAX_OPCODES = 1_000_000       # each opcode builds one object at most: bounds objects and time
MAX_CONTAINERS = 128_000      # lists, dicts, sets, tuples, records: an empty set alone is 216 bytes
MAX_MEMO = 250_000            # memo entries, and one past the highest index
MAX_DEPTH = 32                # containers within containers, and MARKs open at once
MAX_ITEMS = 65_536            # items in one container
MAX_ALL_ITEMS = 1_000_000     # items in all containers together: a REDUCE to set() copies a list
MAX_INT_BYTES = 16            # LONG1/LONG4: 128 bits holds every count and nanosecond clock
MAX_STRING_BYTES = 1 << 20    # one str or bytes
MAX_NAME_BYTES = 256          # a global's module or name
PROTOCOLS = range(2, 6)
DEADLINE_EVERY = 1 << 16      # opcodes between looks at the clock: under 0.1 s

# Dict keys and set members are only what hashes without the sender choosing collisions:
# str and bytes (SipHash, seeded per process), records (by identity), and ints whose hash
# is the int itself (below the hash modulus), so that no two distinct keys share a hash.
_HASH_MODULUS = sys.hash_info.modulus
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
_PY2_MODULES = {"__builtin__": "builtins"}   # protocol 2's spelling, as pickle's fix_imports maps it
_OPCODE_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}
_EXTENSION = "an extension code (copyreg's registry of globals)"
_PERSISTENT = "a persistent id (an object only the writer's program holds)"
_CODE_OPCODES = {"INST": "a class called in protocol 0's form", "OBJ": "a class called in protocol 1's form",
                 "EXT1": _EXTENSION, "EXT2": _EXTENSION, "EXT4": _EXTENSION,
                 "PERSID": _PERSISTENT, "BINPERSID": _PERSISTENT}


class ForeignPickle(NetcheckError, ValueError):
    """Not a pickle this decoder reads: the message says what, and where, in one line."""


class HostilePickle(ForeignPickle):
    """The pickle asks for code: a global not admitted, a persistent id, an extension code,
    a change to a class."""


class Record:
    """An instance of an admitted class, rebuilt as data: its kind and its fields.

    Hashed by identity, as object is: a record is a dict key or set member without
    anything the sender chose being hashed."""

    __slots__ = ("kind", "fields")

    def __init__(self, kind: str):
        self.kind = kind
        self.fields: Mapping[str, object] = types.MappingProxyType({})

    def __repr__(self) -> str:
        return f"Record({self.kind!r}, {dict(self.fields)!r})"


@dataclass(frozen=True)
class RecordClass:
    """An admitted class that pickle builds with NEWOBJ (no arguments) and fills with BUILD."""

    kind: str


@dataclass(frozen=True)
class Factory:
    """An admitted callable that pickle calls with REDUCE: `build` takes the argument tuple,
    checks every part of it, and returns the value (a scalar, a set or bytes, which the
    decoder charges to its limits) or raises ForeignPickle."""

    build: Callable[[tuple], object]


Admitted = Mapping[tuple[str, str], "RecordClass | Factory"]


@dataclass(frozen=True)
class _Global:
    """A global on the stack: only ever called (REDUCE, NEWOBJ), never a value."""

    name: str
    admitted: RecordClass | Factory


def decode(data: bytes, admitted: Admitted, deadline: Deadline | None = None) -> object:
    """The object DATA pickles, built only from plain data and the ADMITTED globals, by the
    deadline if one is given (the caller's --timeout: several values may share it)."""
    if len(data) > MAX_PICKLE_BYTES:
        raise ForeignPickle(f"a pickle of {len(data)} bytes, over the {MAX_PICKLE_BYTES}-byte limit")
    return _Decoder(data, {**_PLAIN, **admitted}, deadline).value()


def is_key(value: object) -> bool:
    """Whether VALUE may be a dict key or set member (see _HASH_MODULUS)."""
    if type(value) is int:
        return -_HASH_MODULUS < value < _HASH_MODULUS
    return type(value) in (str, bytes, bool, type(None), Record)


class _Decoder:
    def __init__(self, data: bytes, admitted: Admitted, deadline: Deadline | None):
        self.data = memoryview(data)
        self.deadline = deadline
        self.pos = self.at = 0
        self.admitted = admitted
        self.protocol = 0
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.depths: dict[int, int] = {}   # id -> nesting depth, of every container built here
        self.sealed: set[int] = set()      # containers inside another (or called with): final
        self.fresh: set[int] = set()       # records made and not built yet
        self.kept: list[object] = []       # every container, alive so no later object takes its id
        self.items = 0                     # items put in containers, all together
        self.made_bytes = 0                # bytes a Factory made (protocol 2's bytes) from memoized text

    def value(self) -> object:
        self._protocol()
        for count in range(MAX_OPCODES):
            if not count % DEADLINE_EVERY and self.deadline is not None and self.deadline.expired():
                raise ForeignPickle(f"not decoded in the time left: {count} opcodes read "
                                    f"of a pickle of {len(self.data)} bytes")
            self.at = self.pos
            code = self._byte()
            handler = _HANDLERS.get(code)
            if handler is None:
                raise self._unread(code)
            if handler is _Decoder._stop:
                return self._stop()
            handler(self)
        raise self._foreign(f"more than {MAX_OPCODES} opcodes")

    # --- errors --------------------------------------------------------------------------

    def _opcode(self) -> str:
        """The name of the opcode being read."""
        return _OPCODE_NAMES[self.data[self.at]]

    def _foreign(self, reason: str) -> ForeignPickle:
        return ForeignPickle(f"not a pickle netcheck can read: {reason} (byte {self.at})")

    def _hostile(self, reason: str) -> HostilePickle:
        return HostilePickle(f"the pickle asks for {reason} (byte {self.at}): refused, never run")

    def _unread(self, code: int) -> ForeignPickle:
        name = _OPCODE_NAMES.get(code)
        if name in _CODE_OPCODES:
            return self._hostile(_CODE_OPCODES[name])
        if name is None:
            return self._foreign(f"byte 0x{code:02x} is no pickle opcode")
        return self._foreign(f"opcode {name} is not in the plain-data pickles netcheck reads")

    # --- reading the stream: every length is checked against what is left -----------------

    def _take(self, size: int) -> memoryview:
        if size > len(self.data) - self.pos:
            raise self._foreign(f"the pickle ends within a {size}-byte argument")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def _byte(self) -> int:
        if self.pos >= len(self.data):
            raise self._foreign("the pickle ends before its STOP")
        self.pos += 1
        return self.data[self.pos - 1]

    def _uint(self, size: int) -> int:
        return int.from_bytes(self._take(size), "little")

    def _sint(self, size: int) -> int:
        return int.from_bytes(self._take(size), "little", signed=True)

    def _payload(self, size: int, what: str) -> memoryview:
        if size > MAX_STRING_BYTES:
            raise self._foreign(f"{what} of {size} bytes, over the {MAX_STRING_BYTES}-byte limit")
        return self._take(size)

    def _line(self) -> str:
        window = bytes(self.data[self.pos:self.pos + MAX_NAME_BYTES + 1])
        end = window.find(b"\n")
        if end < 0:
            raise self._foreign(f"a global's name that does not end within {MAX_NAME_BYTES} bytes")
        self.pos += end + 1
        return window[:end].decode("latin-1")

    # --- the stack -------------------------------------------------------------------------

    def _push(self, value: object) -> None:
        self.stack.append(value)

    def _fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def _pop(self, count: int) -> list[object]:
        if len(self.stack) - count < self._fence():
            raise self._foreign(f"{self._opcode()} finds fewer than {count} values on the stack")
        items = self.stack[-count:]
        del self.stack[-count:]
        return items

    def _top(self) -> object:
        if len(self.stack) <= self._fence():
            raise self._foreign(f"{self._opcode()} finds no value on the stack")
        return self.stack[-1]

    def _marked(self) -> list[object]:
        if not self.marks:
            raise self._foreign(f"{self._opcode()} without a MARK before it")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    # --- containers: counted, their depth known, sealed once inside another ------------------

    def _container(self, value: object, depth: int) -> object:
        if len(self.kept) >= MAX_CONTAINERS:
            raise self._foreign(f"more than {MAX_CONTAINERS} containers")
        self._check_depth(depth)
        self.kept.append(value)
        self.depths[id(value)] = depth
        return value

    def _check_depth(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self._foreign(f"values nested more than {MAX_DEPTH} deep")

    def _settle(self, value: object) -> int:
        """VALUE's depth, once it is an item or an argument: final from now on."""
        if type(value) is _Global:
            raise self._foreign(f"{value.name} used as a value, where its pickles only call it")
        depth = self.depths.get(id(value), 0)
        if depth:
            self.sealed.add(id(value))
        return depth

    def _open(self, target: object, kind: type[T]) -> T:
        """TARGET, which the opcode changes: a KIND exactly, not sealed inside another value."""
        if type(target) is not kind:
            raise self._foreign(f"{self._opcode()} on a {_kind(target)}, not a {kind.__name__}")
        if id(target) in self.sealed:
            raise self._foreign(f"a {kind.__name__} changed after it was put inside another value")
        return target

    def _count(self, items: int) -> None:
        self.items += items
        if self.items > MAX_ALL_ITEMS:
            raise self._foreign(f"more than {MAX_ALL_ITEMS} items in all containers together")

    def _add(self, target: Sized, items: list[object], keys: list[object], entries: int) -> None:
        """Checks before TARGET takes ITEMS (ENTRIES of it, KEYS among them): size, keys,
        depth, no cycle."""
        if len(target) + entries > MAX_ITEMS:
            raise self._foreign(f"a {type(target).__name__} of more than {MAX_ITEMS} items")
        self._count(len(items))
        if not all(is_key(k) for k in keys):
            raise self._foreign(_unsafe_key(next(k for k in keys if not is_key(k))))
        if any(item is target for item in items):
            raise self._foreign(f"a {type(target).__name__} that contains itself")
        depth = 1 + max(self._settle(item) for item in items) if items else 1
        depth = max(self.depths[id(target)], depth)
        self._check_depth(depth)
        self.depths[id(target)] = depth

    def _frozen(self, kind: type, items: list[object]) -> object:
        if not items:
            return kind()
        if len(items) > MAX_ITEMS:
            raise self._foreign(f"a {kind.__name__} of more than {MAX_ITEMS} items")
        if kind is frozenset and not all(is_key(v) for v in items):
            raise self._foreign(_unsafe_key(next(v for v in items if not is_key(v))))
        self._count(len(items))
        depth = 1 + max(self._settle(item) for item in items)
        return self._container(kind(items), depth)

    # --- opcodes ---------------------------------------------------------------------------

    def _protocol(self) -> None:
        if self._byte() != _code("PROTO"):
            raise self._foreign("not a pickle of protocol 2 or later (torch writes 4 or 5)")
        self.protocol = self._byte()
        if self.protocol not in PROTOCOLS:
            raise self._foreign(f"protocol {self.protocol}: netcheck reads protocols 2 to 5")

    def _frame(self) -> None:
        size = self._uint(8)
        if size > len(self.data) - self.pos:
            raise self._foreign(f"a frame of {size} bytes where {len(self.data) - self.pos} remain")

    def _stop(self) -> object:
        if self.marks or len(self.stack) != 1:
            raise self._foreign(f"STOP with {len(self.stack)} value(s) on the stack and {len(self.marks)} MARK(s) open")
        if self.pos != len(self.data):
            raise self._foreign(f"{len(self.data) - self.pos} bytes after the pickle's STOP")
        self._settle(self.stack[0])
        return self.stack[0]

    def _mark(self) -> None:
        if len(self.marks) >= MAX_DEPTH:
            raise self._foreign(f"more than {MAX_DEPTH} MARKs open at once")
        self.marks.append(len(self.stack))

    def _long(self, size: int) -> None:
        if not 0 <= size <= MAX_INT_BYTES:
            raise self._foreign(f"an integer of {size} bytes, over the {MAX_INT_BYTES}-byte limit")
        self._push(self._sint(size))

    def _text(self, size: int) -> None:
        raw = self._payload(size, "a string")
        try:
            self._push(str(raw, "utf-8"))
        except UnicodeDecodeError:
            raise self._foreign("a string that is not UTF-8") from None

    def _bytes(self, size: int) -> None:
        self._push(bytes(self._payload(size, "bytes")))

    def _memoize(self, index: int) -> None:
        if index >= MAX_MEMO:
            raise self._foreign(f"memo index {index}, over the limit of {MAX_MEMO} entries")
        self.memo[index] = self._top()

    def _recall(self, index: int) -> None:
        if index not in self.memo:
            raise self._foreign(f"memo index {index}, never set")
        self._push(self.memo[index])

    def _append_items(self, items: list[object]) -> None:
        target = self._open(self._top(), list)
        self._add(target, items, [], len(items))
        target.extend(items)

    def _set_items(self, items: list[object]) -> None:
        if len(items) % 2:
            raise self._foreign("SETITEMS with a key and no value")
        target = self._open(self._top(), dict)
        self._add(target, items, items[0::2], len(items) // 2)
        target.update(zip(items[0::2], items[1::2]))

    def _add_items(self) -> None:
        items = self._marked()
        target = self._open(self._top(), set)
        self._add(target, items, items, len(items))
        target.update(items)

    def _admit(self, module: object, name: object) -> None:
        if not (_is_name(module) and _is_name(name)):
            raise self._hostile("a global whose name no Python module has")
        if self.protocol < 3:
            module = _PY2_MODULES.get(module, module)
        found = self.admitted.get((module, name))
        if found is None:
            raise self._hostile(f"{module}.{name}, which this format never holds")
        self._push(_Global(f"{module}.{name}", found))

    def _reduce(self) -> None:
        func, args = self._pop(2)
        if not isinstance(func, _Global) or not isinstance(func.admitted, Factory):
            raise self._foreign(f"REDUCE on {_kind(func)}, which this format never calls")
        if type(args) is not tuple:
            raise self._foreign(f"REDUCE with a {_kind(args)} for its arguments")
        depth = self._settle(args)
        try:
            value = func.admitted.build(args)
        except ForeignPickle as e:
            raise self._foreign(f"{func.name}: {e}") from None
        self._push(self._made(value, depth))

    def _made(self, value: object, args_depth: int) -> object:
        """A Factory's VALUE, charged: what it copies from memoized values is not in the stream."""
        if isinstance(value, (set, frozenset)):
            self._count(len(value))
            return self._container(value, max(1, args_depth))
        if isinstance(value, bytes):
            self.made_bytes += len(value)
            if self.made_bytes > MAX_PICKLE_BYTES:
                raise self._foreign(f"more than {MAX_PICKLE_BYTES} bytes made by REDUCE")
        return value

    def _newobj(self) -> None:
        cls, args = self._pop(2)
        if not isinstance(cls, _Global) or not isinstance(cls.admitted, RecordClass):
            raise self._foreign(f"NEWOBJ on {_kind(cls)}, which this format never builds so")
        if type(args) is not tuple or args:
            raise self._foreign(f"NEWOBJ of {cls.name} with arguments, which its pickles never have")
        record = Record(cls.admitted.kind)
        self._push(self._container(record, 1))
        self.fresh.add(id(record))

    def _build(self) -> None:
        state = self._pop(1)[0]
        target = self._top()
        if isinstance(target, _Global):
            raise self._hostile(f"a change to the class {target.name} (BUILD on a class)")
        if type(target) is not Record or id(target) not in self.fresh:
            raise self._foreign(f"BUILD on a {_kind(target)}, not on a record this pickle just made")
        if type(state) is not dict or not all(type(k) is str for k in state):
            raise self._foreign(f"a {target.kind} whose state is not a dict of field names")
        self.fresh.discard(id(target))
        depth = 1 + self._settle(state)
        self._check_depth(depth)
        self.depths[id(target)] = depth
        target.fields = types.MappingProxyType(state)


def _code(name: str) -> int:
    return next(code for code, opcode in _OPCODE_NAMES.items() if opcode == name)


def _is_name(value: object) -> TypeGuard[str]:
    return type(value) is str and len(value) <= MAX_NAME_BYTES and _NAME.fullmatch(value) is not None


def _unsafe_key(value: object) -> str:
    if type(value) is int:
        return (f"an int of {value.bit_length()} bits as a key or set member: "
                "ints that large can be chosen to hash alike")
    return f"a {_kind(value)} as a key or set member, which this format never has"


def _kind(value: object) -> str:
    if isinstance(value, _Global):
        return value.name
    if isinstance(value, Record):
        return value.kind
    return type(value).__name__


_D = _Decoder
_HANDLERS: dict[int, Callable[[_Decoder], object]] = {_code(name): handler for name, handler in {
    "STOP": _D._stop,
    "FRAME": _D._frame,
    "MARK": _D._mark,
    "NONE": lambda d: d._push(None),
    "NEWTRUE": lambda d: d._push(True),
    "NEWFALSE": lambda d: d._push(False),
    "BININT1": lambda d: d._push(d._byte()),
    "BININT2": lambda d: d._push(d._uint(2)),
    "BININT": lambda d: d._push(d._sint(4)),
    "LONG1": lambda d: d._long(d._byte()),
    "LONG4": lambda d: d._long(d._sint(4)),
    "BINFLOAT": lambda d: d._push(struct.unpack(">d", d._take(8))[0]),
    "SHORT_BINUNICODE": lambda d: d._text(d._byte()),
    "BINUNICODE": lambda d: d._text(d._uint(4)),
    "BINUNICODE8": lambda d: d._text(d._uint(8)),
    "SHORT_BINBYTES": lambda d: d._bytes(d._byte()),
    "BINBYTES": lambda d: d._bytes(d._uint(4)),
    "BINBYTES8": lambda d: d._bytes(d._uint(8)),
    "EMPTY_TUPLE": lambda d: d._push(()),
    "TUPLE1": lambda d: d._push(d._frozen(tuple, d._pop(1))),
    "TUPLE2": lambda d: d._push(d._frozen(tuple, d._pop(2))),
    "TUPLE3": lambda d: d._push(d._frozen(tuple, d._pop(3))),
    "TUPLE": lambda d: d._push(d._frozen(tuple, d._marked())),
    "FROZENSET": lambda d: d._push(d._frozen(frozenset, d._marked())),
    "EMPTY_LIST": lambda d: d._push(d._container([], 1)),
    "EMPTY_DICT": lambda d: d._push(d._container({}, 1)),
    "EMPTY_SET": lambda d: d._push(d._container(set(), 1)),
    "APPEND": lambda d: d._append_items(d._pop(1)),
    "APPENDS": lambda d: d._append_items(d._marked()),
    "SETITEM": lambda d: d._set_items(d._pop(2)),
    "SETITEMS": lambda d: d._set_items(d._marked()),
    "ADDITEMS": _D._add_items,
    "BINPUT": lambda d: d._memoize(d._byte()),
    "LONG_BINPUT": lambda d: d._memoize(d._uint(4)),
    "MEMOIZE": lambda d: d._memoize(len(d.memo)),
    "BINGET": lambda d: d._recall(d._byte()),
    "LONG_BINGET": lambda d: d._recall(d._uint(4)),
    "GLOBAL": lambda d: d._admit(d._line(), d._line()),
    "STACK_GLOBAL": lambda d: d._admit(*d._pop(2)),
    "REDUCE": _D._reduce,
    "NEWOBJ": _D._newobj,
    "BUILD": _D._build,
}.items()}


# --- the admitted constructors: every argument checked before the object is made ----------

def _set_factory(kind: type) -> Factory:
    """builtins.set / frozenset as protocols 2 and 3 write them: the type called with a list."""
    def build(args: tuple) -> object:
        if args == ():
            return kind()
        if len(args) != 1 or type(args[0]) is not list:
            raise ForeignPickle(f"called with {len(args)} arguments where a list belongs")
        if not all(is_key(v) for v in args[0]):
            raise ForeignPickle(_unsafe_key(next(v for v in args[0] if not is_key(v))))
        return kind(args[0])
    return Factory(build)


def _empty_bytes(args: tuple) -> bytes:
    """builtins.bytes(): how protocol 2 writes b""."""
    if args != ():
        raise ForeignPickle("called with arguments, which protocol 2 writes only for b\"\"")
    return b""


def _latin1_bytes(args: tuple) -> bytes:
    """_codecs.encode(text, 'latin1'): how protocol 2 writes bytes."""
    if len(args) != 2 or type(args[0]) is not str or args[1] != "latin1":
        raise ForeignPickle("called otherwise than protocol 2 writes bytes")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise ForeignPickle("text that is not latin-1 where bytes belong") from None


def _datetime(args: tuple) -> datetime.datetime:
    """datetime from its pickled state: 10 bytes, then a fixed-offset time zone if aware."""
    if not 1 <= len(args) <= 2 or type(args[0]) is not bytes or len(args[0]) != 10:
        raise ForeignPickle("a datetime whose state is not 10 bytes")
    zone = args[1] if len(args) == 2 else None
    if len(args) == 2 and type(zone) is not datetime.timezone:
        raise ForeignPickle(f"a datetime whose time zone is a {_kind(zone)}, not a fixed offset")
    b = args[0]
    year, month, fold, day = b[0] << 8 | b[1], b[2] & 0x7F, b[2] >> 7, b[3]
    hour, minute, second, micro = b[4], b[5], b[6], b[7] << 16 | b[8] << 8 | b[9]
    if not (datetime.MINYEAR <= year <= datetime.MAXYEAR and 1 <= month <= 12
            and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour < 24 and minute < 60 and second < 60 and micro < 1_000_000):
        raise ForeignPickle("datetime bytes that are no date")
    return datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=zone, fold=fold)


def _timedelta(args: tuple) -> datetime.timedelta:
    """timedelta from (days, seconds, microseconds), as it pickles itself: normalised."""
    if len(args) != 3 or any(type(a) is not int for a in args):
        raise ForeignPickle("a timedelta that is not three integers")
    days, seconds, micros = args
    if not (-999_999_999 <= days <= 999_999_999 and 0 <= seconds < 86_400 and 0 <= micros < 1_000_000):
        raise ForeignPickle("a timedelta out of range")
    return datetime.timedelta(days, seconds, micros)


_DAY = datetime.timedelta(days=1)


def _timezone(args: tuple) -> datetime.timezone:
    """timezone from (offset,) or (offset, name): an offset strictly within a day."""
    if not 1 <= len(args) <= 2 or type(args[0]) is not datetime.timedelta:
        raise ForeignPickle("a time zone that is not an offset")
    if not -_DAY < args[0] < _DAY:
        raise ForeignPickle("a time zone offset of a day or more")
    if len(args) == 1:
        return datetime.timezone(args[0])
    if type(args[1]) is not str or len(args[1]) > MAX_NAME_BYTES:
        raise ForeignPickle("a time zone whose name is not a short string")
    return datetime.timezone(args[0], args[1])


_PLAIN: dict[tuple[str, str], RecordClass | Factory] = {
    ("builtins", "set"): _set_factory(set),
    ("builtins", "frozenset"): _set_factory(frozenset),
    ("builtins", "bytes"): Factory(_empty_bytes),
    ("_codecs", "encode"): Factory(_latin1_bytes),
}
DATETIMES: dict[tuple[str, str], RecordClass | Factory] = {
    ("datetime", "datetime"): Factory(_datetime),
    ("datetime", "timedelta"): Factory(_timedelta),
    ("datetime", "timezone"): Factory(_timezone),
}
