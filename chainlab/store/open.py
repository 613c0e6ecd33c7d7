"""``open_store(url_or_path)``: the one way a front end (CLI ``--db``, magics ``--db``,
``CHAINLAB_DB``) turns what a user typed into a Store (DESIGN §13)."""

from __future__ import annotations

import os
import re

from chainlab.errors import StoreError
from chainlab.store.base import Store
from chainlab.store.memory import MemoryStore
from chainlab.store.sqlite import DEFAULT_PATH, SQLiteStore

__all__ = ["MEMORY", "open_store", "store_location"]

#: the location of a throwaway store kept in this process (a MemoryStore)
MEMORY = ":memory:"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: not a drive C:
_SQLITE = "sqlite:///"


def store_location(url_or_path: str | os.PathLike[str] | None = None) -> str:
    """Where :func:`open_store` would open: ``":memory:"`` or the path of a SQLite file.

    ``None`` means ``CHAINLAB_DB`` when set, else ``.chainlab/chainlab.db``. A path or
    ``sqlite:///path`` (``sqlite:////abs/path`` for an absolute one) is a SQLite file.
    Raises StoreError for ``postgresql://`` (not built yet) and for other URLs.
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
        raise StoreError(f"{_redacted(where)!r}: PostgreSQL stores are not built yet; use a "
                         "SQLite file (a path, or sqlite:///path) or ':memory:' for now")
    if scheme == "sqlite":
        path = where[len(_SQLITE):] if where.startswith(_SQLITE) else ""
        if not path:
            raise StoreError(f"{where!r} is not a SQLite URL: write sqlite:///relative/path, "
                             "sqlite:////absolute/path, or just the path")
        return path
    raise StoreError(f"{_redacted(where)!r}: unknown kind of store {scheme!r}; use a path, "
                     "sqlite:///path or ':memory:'")


def open_store(url_or_path: str | os.PathLike[str] | None = None, *,
               readonly: bool = False) -> Store:
    """The store at ``url_or_path`` (see :func:`store_location`): ``":memory:"`` gives a
    MemoryStore (lives as long as this process), anything else a SQLiteStore; with
    ``readonly`` a SQLite file is opened without writing (SQLiteStore ``readonly=True``).

    Raises StoreError (an unknown or unsupported URL), StoreFileError (the file cannot be
    used; with ``readonly``, also when it does not exist).
    """
    where = store_location(url_or_path)
    if where == MEMORY:
        return MemoryStore()
    return SQLiteStore(where, readonly=readonly)


def _redacted(url: str) -> str:
    """The URL without a password (messages end up in logs)."""
    return re.sub(r"^([^:]+:/+[^/@:]*):[^/@]*@", r"\1:***@", url)
