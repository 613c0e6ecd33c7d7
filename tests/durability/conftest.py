from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.durability.harness import ForkServer


def pytest_configure(config: pytest.Config) -> None:
    # the process-heavy tests share one xdist worker (loadgroup), so they do not compete for
    # the two cores; registered here too so that `-p no:xdist` runs still pass --strict-markers
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def forkserver() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()
