"""A node's environment as one record: dotted key -> value, and the values that mean "none"."""

from __future__ import annotations

from dataclasses import dataclass

from netcheck.core.fields import Seconds, Text


NO_CUDA = "no CUDA"
NOT_LOADED = "not loaded"
ABSENT = "absent"


@dataclass(frozen=True)
class EnvFacts:
    """One node's environment: dotted key -> value, e.g. "torch.version" -> "2.13.0+cpu"."""

    values: dict[str, Text]    # a value may be a whole config file (envinfo.CONF_INLINE_BYTES)
    seconds: Seconds = 0.0     # how long gathering took
