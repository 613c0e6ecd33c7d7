"""Fixtures shared by several test packages: the session's throwaway PostgreSQL server.
Graphviz layouts the tests make are kept in a directory of the test session, never in the
user's cache (``CHAINLAB_LAYOUT_CACHE``, inherited by the kernels and servers tests start)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.pg import Cluster, Unavailable, shared_cluster, stop_shared_cluster

if "CHAINLAB_LAYOUT_CACHE" not in os.environ:
    _layouts = tempfile.mkdtemp(prefix="chainlab-test-layouts-")
    os.environ["CHAINLAB_LAYOUT_CACHE"] = _layouts
    atexit.register(shutil.rmtree, _layouts, ignore_errors=True)


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
