"""Tools for the Dask kill tests (tests/test_dask_kills.py), in their own module so that Dask
worker PROCESSES import them by name: a side-effecting, non-idempotent ``charge`` that writes
one line per charge to a ledger file (the world), after saying which process runs it. And
the LocalCluster client both Dask test modules use."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chainlab import CallContext, Toolbox

toolbox = Toolbox("dask-ledger")

# The interpreter's own __main__, kept at collection: an in-process IPython shell of another
# test in this pytest process puts its user namespace there, and clearing that namespace
# drops ``__spec__``, which multiprocessing's spawn reads to start a Dask worker process
# ("Nanny failed to start" in CI once a notebook test had run first on the same xdist worker).
_MAIN = sys.modules["__main__"]


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@toolbox.tool(side_effects=True, requires_confirmation=True)
def charge(account: str, amount: int, ledger: str, before_s: float, after_s: float,
           ctx: CallContext) -> dict[str, Any]:
    """Charge ``amount`` to ``account``: one ledger line per charge (never deduplicated)."""
    where = Path(ledger)
    _append(where / "started", f"{ctx.step_id} {ctx.attempt} {os.getpid()}\n")
    time.sleep(before_s)
    _append(where / "charges", f"{ctx.step_id} {ctx.idempotency_key} {os.getpid()}\n")
    time.sleep(after_s)
    return {"account": account, "charged": amount}


@toolbox.tool(idempotent=True, side_effects=True)
def upsert(key: str, ledger: str, before_s: float, ctx: CallContext) -> str:
    """An idempotent write (safe to repeat): a worker death may retry it."""
    where = Path(ledger)
    _append(where / "started", f"{ctx.step_id} {ctx.attempt} {os.getpid()}\n")
    time.sleep(before_s)
    _append(where / "upserts", f"{ctx.step_id} {ctx.attempt} {os.getpid()}\n")
    return key


def ledger_lines(ledger: str | Path, name: str) -> list[list[str]]:
    path = Path(ledger) / name
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@contextmanager
def cluster_client(**cluster: Any) -> Iterator[Any]:
    """A client of a new ``distributed.LocalCluster(**cluster)``, both closed after."""
    import distributed

    shell_main = sys.modules["__main__"]
    sys.modules["__main__"] = _MAIN  # for the cluster's life: a killed worker is respawned
    try:
        local = distributed.LocalCluster(dashboard_address=":0", **cluster)
        client = distributed.Client(local)
        try:
            yield client
        finally:
            client.close()
            local.close()
    finally:
        sys.modules["__main__"] = shell_main
