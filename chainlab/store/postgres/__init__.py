"""The PostgreSQL store: :class:`PostgresStore` (:mod:`.store`), its schema and migrations
(:mod:`.schema`) and its driver heartbeats and decision mailbox (:mod:`.drivers`). Importing
it imports psycopg (``pip install "chainlab[postgres]"``)."""

from chainlab.store.postgres.store import CHANNEL, PostgresStore

__all__ = ["CHANNEL", "PostgresStore"]
