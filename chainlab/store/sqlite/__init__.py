"""The SQLite store (the default): :class:`SQLiteStore` (:mod:`.store`), its schema and
migrations (:mod:`.schema`)."""

from chainlab.store.sqlite.store import DEFAULT_PATH, MIGRATIONS, SQLiteStore

__all__ = ["DEFAULT_PATH", "MIGRATIONS", "SQLiteStore"]
