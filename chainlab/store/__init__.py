"""Storage: the Store protocol, an in-memory store and the SQLite store (the default), and
``open_store(url_or_path)``, which front ends open them with."""

from chainlab.events.event import Event
from chainlab.store.base import RunRecord, Store
from chainlab.store.memory import MemoryStore
from chainlab.store.open import open_store, store_location
from chainlab.store.sqlite import SQLiteStore

__all__ = ["Event", "MemoryStore", "RunRecord", "SQLiteStore", "Store", "open_store",
           "store_location"]
