"""The store's branch of the exception tree: :class:`StoreError` and what a store raises
(no such run, a stale writer fenced off, a database file or server that cannot be used).

Their public home is :mod:`chainlab.errors` (``from chainlab.errors import StoreFileError``),
which draws the whole tree, re-exports them and gives them its name as their ``__module__``.
They live here as one branch a reader finds whole, built on the tree's root
(:mod:`chainlab._error_root`) so that nothing imports back; not in :mod:`chainlab.store`,
which ``import chainlab`` must not load.
"""

from __future__ import annotations

from collections.abc import Iterable

from chainlab._error_root import ChainlabError

__all__ = ["ExperimentNotFoundError", "RunExistsError", "RunNotFoundError", "StaleEpochError",
           "StoreError", "StoreFileError", "StoreServerError"]


class StoreError(ChainlabError):
    """The store cannot do what was asked."""


class RunNotFoundError(StoreError, KeyError):
    """No run with that id in the store."""

    def __init__(self, run_id: str, known: Iterable[str] = ()):
        from chainlab._text import did_you_mean

        self.run_id = run_id
        super().__init__(f"no run {run_id!r} in the store{did_you_mean(run_id, known)}")

    def __str__(self) -> str:
        return str(self.args[0])


class ExperimentNotFoundError(StoreError, KeyError):
    """No experiment with that id in the store."""

    def __init__(self, experiment_id: str, known: Iterable[str] = ()):
        from chainlab._text import did_you_mean

        self.experiment_id = experiment_id
        super().__init__(f"no experiment {experiment_id!r} in the store"
                         f"{did_you_mean(experiment_id, known)}; `chainlab experiment --list` "
                         "lists them")

    def __str__(self) -> str:
        return str(self.args[0])


class RunExistsError(StoreError):
    """A run cannot be created: its id is taken, or its idempotency key already names a run.
    ``.run_id`` is the run that exists (the one the key names, when ``.key`` is set)."""

    def __init__(self, run_id: str, key: str | None = None):
        self.run_id = run_id
        self.key = key
        if key is None:
            text = f"run {run_id!r} already exists"
        else:
            text = f"idempotency key {key!r} already names run {run_id!r}"
        super().__init__(text)


class StaleEpochError(StoreError):
    """A newer writer took over the run (its epoch is higher); this writer must stop.

    Nothing this writer tried to commit after the takeover was written.
    """

    def __init__(self, run_id: str, epoch: int, current: int | None, *,
                 moved_on: tuple[int, int] | None = None):
        self.run_id = run_id
        self.epoch = epoch
        self.current = current
        self.moved_on = moved_on
        if moved_on is not None:
            text = (f"run {run_id!r} moved on since it was read (last event {moved_on[0]}, "
                    f"now {moved_on[1]}): another process decided or drives it; read it again")
        else:
            text = (f"run {run_id!r}: writer epoch {epoch} is stale (the store is at epoch "
                    f"{current}); another process resumed this run, so this one stops "
                    "without writing")
        super().__init__(text)


class StoreFileError(StoreError):
    """The store's database file cannot be used as it is; the message ends with the fix.

    ``.path`` is the file, ``.fix`` what to do, ``.fault`` one of :attr:`FAULTS`:
    ``"gone"`` deleted or replaced while in use (nothing written since is durable),
    ``"readonly"`` this process may not write the file or its directory, ``"corrupt"`` not
    a database or a damaged one, ``"locked"`` another process kept a write transaction open
    too long, ``"old_schema"`` opened read-only but needs a migration, ``"unavailable"``
    cannot be opened or created (missing, no such directory, disk full, I/O error).
    """

    FAULTS = ("gone", "readonly", "corrupt", "locked", "old_schema", "unavailable")

    def __init__(self, path: str, fault: str, message: str, fix: str):
        if fault not in self.FAULTS:
            raise ValueError(f"fault must be one of {self.FAULTS}, got {fault!r}")
        self.path = path
        self.fault = fault
        self.fix = fix
        super().__init__(f"{message}; {fix}")


class StoreServerError(StoreError):
    """The store's database server cannot be used; the message ends with the fix.

    ``.where`` is the server and database (the URL without its password), ``.fix`` what to
    do, ``.fault`` one of :attr:`FAULTS`: ``"unreachable"`` no server answers there,
    ``"credentials"`` the server refused the user or password, ``"no_database"`` the database
    does not exist, ``"newer_schema"`` a newer chainlab migrated it, ``"dropped"`` the
    connection was lost mid-operation (what was committed before is kept), ``"server"`` any
    other refusal of the server.
    """

    FAULTS = ("unreachable", "credentials", "no_database", "newer_schema", "dropped", "server")

    def __init__(self, where: str, fault: str, message: str, fix: str):
        if fault not in self.FAULTS:
            raise ValueError(f"fault must be one of {self.FAULTS}, got {fault!r}")
        self.where = where
        self.fault = fault
        self.fix = fix
        super().__init__(f"{message}; {fix}")
