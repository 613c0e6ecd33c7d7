"""The ONE place where psycopg's errors become chainlab's (:func:`_server_error`), and
which of them a store may retry, for the store and its drivers alike."""

from __future__ import annotations

from chainlab.errors import MissingExtraError, StoreServerError

try:
    import psycopg
    from psycopg_pool import PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(exc.name or "psycopg", "postgres", "PostgresStore") from exc

__all__ = ["PoolTimeout"]


def _dropped(exc: psycopg.Error) -> bool:
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.OperationalError) and (
        sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03") or not sqlstate)


def _retryable(exc: psycopg.Error) -> bool:
    return (getattr(exc, "sqlstate", None) or "") in ("40P01", "40001")


def _server_error(exc: BaseException, where: str, doing: str,
                  lost: str | None = None) -> StoreServerError:
    """The ONE place where psycopg's errors become chainlab's: the cause, where, the fix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    low = str(exc).lower()
    if any(s in low for s in ("password authentication failed", "no password supplied",
                              "authentication failed", "pg_hba.conf")) or (
            "role" in low and "does not exist" in low):
        return StoreServerError(
            where, "credentials", f"the PostgreSQL server refused the login to {where} "
            f"({text})", "check the user and password in the URL (or PGPASSWORD / "
            "~/.pgpass) and that pg_hba.conf lets this user connect to this database")
    if "database" in low and "does not exist" in low:
        return StoreServerError(
            where, "no_database", f"{where} does not exist ({text})",
            "create it (createdb NAME, or CREATE DATABASE NAME) or fix the database name "
            "in the URL")
    connect = doing in ("open", "connect to") or isinstance(exc, PoolTimeout)
    unreachable = any(s in low for s in (
        "connection refused", "no such file or directory", "could not translate host name",
        "timeout expired", "is the server running", "name or service not known",
        "couldn't get a connection"))
    if connect and unreachable:
        return StoreServerError(
            where, "unreachable", f"cannot reach the PostgreSQL server for {where} ({text})",
            "start the server (or check host, port and socket directory in the URL), then "
            "try again")
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        kept = f"; {lost}" if lost else "; what was committed before is kept"
        return StoreServerError(
            where, "dropped", f"lost the connection to {where} while trying to {doing} it "
            f"({text}){kept}", "check that the server is up and reachable, then resume the "
            "run (`chainlab resume RUN_ID` or runtime.resume(run_id)): committed events "
            "are never lost")
    kept = f"; {lost}" if lost else ""
    return StoreServerError(where, "server", f"{where} refused to {doing} it ({text}){kept}",
                            "see the server's message; the database may need attention "
                            "from its administrator")
