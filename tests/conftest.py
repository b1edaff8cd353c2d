"""Shared pytest fixtures and markers.

Each concern lives in its own section of small functions so more can be added beside it.
"""

from __future__ import annotations

import os

import pytest

from cluster import Cluster, NodeSpec, namespaces_supported

# --------------------------------------------------------------------------------------
# root_required: tests that need root and network namespaces.
# Skipped on a developer's machine without root; under CI=true a missing capability is a
# failure, so a misconfigured CI runner cannot silently skip the cluster tests.

ROOT_MARKER = "root_required"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{ROOT_MARKER}: needs root and network namespaces (skipped without them, "
        "a failure when CI=true)",
    )


def require_namespaces() -> None:
    """Skip (or fail under CI=true) when simulated clusters cannot be built here."""
    if namespaces_supported():
        return
    why = "needs root with working `ip netns`, unshare, iptables, ip6tables, tc and sysctl"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; CI=true, so this is a failure, not a skip", pytrace=False)
    pytest.skip(why)


def pytest_runtest_setup(item):
    if item.get_closest_marker(ROOT_MARKER):
        require_namespaces()


# --------------------------------------------------------------------------------------
# cluster: a factory of simulated clusters, every one torn down at the end of the test
# whatever happened in it. Use `with cluster([NodeSpec(), NodeSpec(ifname="ens5")]) as c:`
# or `c = cluster([...]).up()`.


@pytest.fixture
def cluster():
    require_namespaces()
    made: list[Cluster] = []

    def make(specs: list[NodeSpec], **kw) -> Cluster:
        c = Cluster(specs, **kw)
        made.append(c)
        return c

    yield make
    _down_all(made)


def _down_all(clusters: list[Cluster]) -> None:
    errors = []
    for c in clusters:
        try:
            c.down()
        except Exception as e:  # tear the others down before reporting
            errors.append(e)
    if errors:
        raise errors[0]
