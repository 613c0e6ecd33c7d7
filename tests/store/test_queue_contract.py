"""The queue contract (chainlab.testing.queue_contract: claims, limits, keys, workers, and
the all-or-nothing creation of a run) against every store of ``conftest.STORE_KINDS``
(DESIGN §19, issue 36 item 2)."""

from __future__ import annotations

from chainlab.testing.queue_contract import QueueContract


class TestEveryStore(QueueContract):
    """The ``store`` fixture (conftest) is parametrized over the store kinds."""
