"""Storage: the Store protocol, an in-memory store and the SQLite store (the default)."""

from chainlab.events.event import Event
from chainlab.store.base import RunRecord, Store
from chainlab.store.memory import MemoryStore
from chainlab.store.sqlite import SQLiteStore

__all__ = ["Event", "MemoryStore", "RunRecord", "SQLiteStore", "Store"]
