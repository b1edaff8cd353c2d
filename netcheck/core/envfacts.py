"""A node's environment as one record: dotted key -> value, the values that mean "none", and
how a size among them is said (shm.bytes, a --hash read): `1.5 GiB`, `512 bytes`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from netcheck.core.fields import FEW, SHARED, Seconds, Text

NO_CUDA = "no CUDA"
NOT_LOADED = "not loaded"
ABSENT = "absent"
UNREADABLE = "unreadable: "   # a --hash path that could not be read: the value starts so, the error after


@dataclass(frozen=True)
class EnvFacts:
    """One node's environment: dotted key -> value, e.g. "torch.version" -> "2.13.0+cpu"."""

    values: Annotated[dict[str, Text], FEW, SHARED]    # a value may be a whole config file (envinfo.CONF_INLINE_BYTES)
    seconds: Seconds = 0.0     # how long gathering took
