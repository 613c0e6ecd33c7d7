"""The store contract (chainlab.testing.store_contract, which ships so that a third-party
store can run it) against every store of ``conftest.STORE_KINDS``: memory, SQLite on a file,
SQLite ``:memory:`` and PostgreSQL (DESIGN §7, §13)."""

from __future__ import annotations

from chainlab.testing.store_contract import StoreContract


class TestEveryStore(StoreContract):
    """The ``store`` fixture (conftest) is parametrized over the store kinds."""
