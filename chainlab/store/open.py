"""``open_store(url_or_path)``: the one way a front end (CLI ``--db``, magics ``--db``,
``CHAINLAB_DB``) turns what a user typed into a Store (DESIGN §13)."""

from __future__ import annotations

import os
import re

from chainlab.errors import StoreError
from chainlab.store.base import Store
from chainlab.store.memory import MemoryStore
from chainlab.store.sqlite import DEFAULT_PATH, SQLiteStore

__all__ = ["MEMORY", "is_server", "open_store", "redacted", "store_location"]

#: the location of a throwaway store kept in this process (a MemoryStore)
MEMORY = ":memory:"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: not a drive C:
_SQLITE = "sqlite:///"


def store_location(url_or_path: str | os.PathLike[str] | None = None) -> str:
    """Where :func:`open_store` would open: ``":memory:"``, a ``postgresql://`` URL or the
    path of a SQLite file.

    ``None`` means ``CHAINLAB_DB`` when set, else ``.chainlab/chainlab.db``. A path or
    ``sqlite:///path`` (``sqlite:////abs/path`` for an absolute one) is a SQLite file;
    ``postgresql://...`` (or ``postgres://``, ``postgresql+psycopg://``) is a PostgreSQL
    database and is returned as a ``postgresql://`` URL (see :func:`is_server`).
    Raises StoreError for other URLs.
    """
    if url_or_path is None:
        url_or_path = os.environ.get("CHAINLAB_DB") or DEFAULT_PATH
    where = os.fspath(url_or_path)
    if where == MEMORY:
        return MEMORY
    match = _SCHEME.match(where)
    if match is None:
        return where
    scheme = match.group(1).lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        return "postgresql:" + where[len(scheme) + 1:]  # libpq knows no "+driver" schemes
    if scheme == "sqlite":
        path = where[len(_SQLITE):] if where.startswith(_SQLITE) else ""
        if not path:
            raise StoreError(f"{where!r} is not a SQLite URL: write sqlite:///relative/path, "
                             "sqlite:////absolute/path, or just the path")
        return path
    raise StoreError(f"{redacted(where)!r}: unknown kind of store {scheme!r}; use a path, "
                     "sqlite:///path, postgresql://... or ':memory:'")


def open_store(url_or_path: str | os.PathLike[str] | None = None, *,
               readonly: bool = False) -> Store:
    """The store at ``url_or_path`` (see :func:`store_location`): ``":memory:"`` gives a
    MemoryStore (lives as long as this process), ``postgresql://...`` a PostgresStore
    (needs the ``postgres`` extra), anything else a SQLiteStore; with ``readonly`` a SQLite
    file is opened without writing (SQLiteStore ``readonly=True``; a PostgreSQL database is
    opened as usual: give the URL a read-only role to forbid writes).

    Raises StoreError (an unknown or unsupported URL), StoreFileError (the file cannot be
    used; with ``readonly``, also when it does not exist), StoreServerError (the PostgreSQL
    server cannot be used), MissingExtraError (psycopg is not installed).
    """
    where = store_location(url_or_path)
    if where == MEMORY:
        return MemoryStore()
    if is_server(where):
        from chainlab.store.postgres import PostgresStore  # lazy: psycopg only when asked

        return PostgresStore(where)
    return SQLiteStore(where, readonly=readonly)


def is_server(location: str) -> bool:
    """True when ``location`` (from :func:`store_location`) is a database server's URL,
    not a file: there is no file to check for."""
    return location.startswith("postgresql:")


def redacted(url: str) -> str:
    """``url`` without its password (messages end up in logs); anything else unchanged."""
    return re.sub(r"^([^:]+:/+[^/@:]*):[^/@]*@", r"\1:***@", url)
