"""``--dask ADDRESS``: the Dask executor for a command (chainlab.dask is imported only here,
and only when asked for; it is the only module that imports Dask)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from chainlab.cli.common import CliError

__all__ = ["executor_for"]


@contextmanager
def executor_for(address: str | None) -> Iterator[Any]:
    """None (the default executor) without an address; else a DaskExecutor on a client of
    that scheduler (``local``: a LocalCluster of this machine), closed afterwards. The
    connect timeout is Dask's (``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT``, 30 s)."""
    if not address:
        yield None
        return
    from chainlab.dask import DaskExecutor  # MissingExtraError names the `dask` extra

    try:
        executor = DaskExecutor.connect(address)
    except ConnectionError as exc:
        raise CliError(str(exc), hint="start one with `dask scheduler` and `dask worker "
                                      "ADDRESS`, or pass --dask local") from None
    with executor:
        yield executor
