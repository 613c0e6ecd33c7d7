"""``chainlab run --dask ADDRESS``: tool bodies run on the workers of an existing cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import HERE, TOOLS, chainlab, write

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler(pytestconfig: pytest.Config) -> Iterator[tuple[str, Any]]:
    """A cluster whose workers are threads of THIS process, reachable over TCP by the CLI
    subprocess; the workers import the tools module by the name the CLI sends."""
    import sys

    sys.path.insert(0, str(HERE))
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                       protocol="tcp://", host="127.0.0.1",
                                       dashboard_address=":0")
    try:
        yield cluster.scheduler_address, cluster
    finally:
        cluster.close()
        sys.path.remove(str(HERE))


def test_run_on_a_dask_cluster(tmp_path: Path, scheduler: tuple[str, Any]) -> None:
    address, cluster = scheduler
    chain = write(tmp_path / "where.yaml", """
name: where
steps:
  - {id: w1, tool: where}
  - {id: w2, tool: where}
  - {id: sum, tool: add, args: {a: 1, b: 2}, depends_on: [w1, w2]}
""")
    r = chainlab("run", str(chain), "--tools", TOOLS, "--dask", address, "--json",
                 cwd=tmp_path)
    assert r.code == 0, r.err
    outputs = r.json["outputs"]
    workers = set(cluster.scheduler_info["workers"])
    for step in ("w1", "w2"):
        assert outputs[step]["worker"] in workers
        assert "Dask" in outputs[step]["thread"]
    assert outputs["sum"] == 3


def test_an_unreachable_scheduler_is_a_usage_error(tmp_path: Path) -> None:
    chain = write(tmp_path / "a.yaml", "name: a\nsteps:\n  - {id: a, tool: add, "
                                       "args: {a: 1, b: 1}}\n")
    r = chainlab("run", str(chain), "--tools", TOOLS, "--dask", "tcp://127.0.0.1:9",
                 cwd=tmp_path, timeout=120, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="1s")
    assert r.code == 2
    assert "cannot connect to the Dask scheduler at 'tcp://127.0.0.1:9'" in r.err
