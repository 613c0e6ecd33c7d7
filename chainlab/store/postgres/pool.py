"""PostgresStore's connection pool (psycopg_pool), and the one way its code borrows from it:
:func:`lend`, a connection that answered a check just now.

After a server restart (or a proxy's idle cut) every idle connection of the pool is dead,
and psycopg learns it only when it uses one: each would fail its first read or write once
(issue 44: a long-lived widget saw StoreServerError once per stale connection). ``lend``
checks the connection it takes (one empty query); the first that fails makes the pool
check all of its idle connections at once (``ConnectionPool.check``: the dead ones replaced
by new ones) and another is taken. The pool's own ``check=`` is not used: psycopg_pool
3.3 sleeps with a back-off between two failed checks (1 s, 2 s, 4 s ...: 6.6 s for four
stale connections, ``benchmarks/bench_pg_pool.py``). A connection the server drops WHILE
it is used still fails that call: the store retries a read once, never a write.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from chainlab.errors import MissingExtraError

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(exc.name or "psycopg", "postgres", "PostgresStore") from exc

__all__ = ["lend", "make_pool"]


def make_pool(dsn: str, size: int, timeout: float) -> ConnectionPool:
    """The store's pool: 1 to ``size`` autocommit connections, ``timeout`` seconds to get
    one (and to connect)."""
    return ConnectionPool(
        dsn, min_size=1, max_size=max(1, size), timeout=timeout,
        kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
        name="chainlab-postgres", open=True)


@contextlib.contextmanager
def lend(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A pooled connection that answered a check just now (see the module docstring).
    Raises psycopg.Error or PoolTimeout as the pool does (the caller maps them)."""
    with pool.connection() as conn:
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.OperationalError:
            pass  # dead: returned broken, the pool discards it
        else:
            yield conn
            return
    pool.check()  # every other idle one too: all replaced at once, no back-off
    with pool.connection() as conn:
        yield conn
