"""Fixtures shared by several test packages: the session's throwaway PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import Cluster, Unavailable, shared_cluster, stop_shared_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A PostgreSQL server started for this test session (skips, saying why, when none can
    be started); stopped at the end of the session."""
    try:
        cluster = shared_cluster()
    except Unavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    stop_shared_cluster()
