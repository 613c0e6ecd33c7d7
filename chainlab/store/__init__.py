"""Storage: the store protocols (run log, drivers, mailbox, notifier), an in-memory store,
the SQLite store (the default), the PostgreSQL store (``PostgresStore``, imported on first
use: ``import chainlab.store`` never imports psycopg), and ``open_store(url_or_path)``, which
front ends open them with."""

from typing import Any

from chainlab.events.event import Event
from chainlab.store.base import (
    DecisionRequest,
    DriverInfo,
    Drivers,
    Mailbox,
    Notifier,
    RunLog,
    RunRecord,
    Store,
)
from chainlab.store.memory import MemoryStore
from chainlab.store.open import open_store, store_location
from chainlab.store.sqlite import SQLiteStore

__all__ = ["DecisionRequest", "DriverInfo", "Drivers", "Event", "Mailbox", "MemoryStore",
           "Notifier", "PostgresStore", "RunLog", "RunRecord", "SQLiteStore", "Store",
           "open_store", "store_location"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # psycopg is an optional extra: load it only when asked
        from chainlab.store.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
