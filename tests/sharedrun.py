"""A cluster run that several read-only tests of a module look at, made once in a
module-scoped fixture, held to the promise conftest's watchdog holds each test's own runs to:
no netcheck process or worker outlives it.

    @pytest.fixture(scope="module")
    def runs(tmp_path_factory):
        with Cluster(specs) as c, watched():   # checked before the teardown kills what is left
            return finish_all([...], limit)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from conftest import WATCHDOG_ENV, kill_stragglers


@contextmanager
def watched() -> Iterator[None]:
    """Processes started inside carry a tag of their own (a module fixture runs before any
    test's watchdog); any netcheck process still carrying it at the end fails the run."""
    tag = f"{os.getpid()}-shared-{uuid.uuid4().hex}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WATCHDOG_ENV, tag)
        yield
    left = kill_stragglers(tag)
    if left:
        pytest.fail("netcheck processes outlived the shared run (now killed):\n  " + "\n  ".join(left), pytrace=False)
