"""LISTEN/NOTIFY for the PostgreSQL store: one :class:`Listener` thread per store and
concern, that LISTENs on its channels, folds each notification into what it knows (the last
committed seq of each run; the newest request of each run and the answered requests) and wakes
whoever waits. It reconnects after a dropped connection; waiters time out and read the
store themselves meanwhile, so a lost notification costs a poll, never an event."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from chainlab.errors import StoreError

__all__ = ["CHANNEL", "EventListener", "Listener", "MailListener", "PostgresWatching"]

#: the NOTIFY channel of committed events (payload ``"<run_id> <last seq>"``)
CHANNEL = "chainlab_events"


class Listener(threading.Thread):
    """LISTENs on ``channels``; :meth:`note` folds each notification (under ``changed``)."""

    def __init__(self, dsn: str, connect_timeout: float, channels: tuple[str, ...],
                 name: str):
        super().__init__(name=name, daemon=True)
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.channels = channels
        self.ready = threading.Event()
        self.changed = threading.Condition()
        self._stopping = threading.Event()

    def note(self, channel: str, payload: str) -> None:
        raise NotImplementedError

    def wait(self, woken: Callable[[], bool], timeout: float) -> bool:
        """Block until ``woken()`` (checked on every notification) or ``timeout``."""
        with self.changed:
            return self.changed.wait_for(lambda: woken() or self._stopping.is_set(), timeout)

    def stop(self) -> None:
        self._stopping.set()
        with self.changed:
            self.changed.notify_all()
        self.join(timeout=5)

    def run(self) -> None:
        while not self._stopping.is_set():
            conn: psycopg.Connection | None = None
            try:
                conn = psycopg.connect(self.dsn, autocommit=True,
                                       connect_timeout=max(1, int(self.connect_timeout)))
                for channel in self.channels:
                    conn.execute(f"LISTEN {channel}")
                self.ready.set()
                while not self._stopping.is_set():
                    for n in conn.notifies(timeout=0.5):
                        with self.changed:
                            self.note(n.channel, n.payload)
                            self.changed.notify_all()
            except (psycopg.Error, ValueError):
                self.ready.set()  # nobody waits for a listener that cannot connect
                self._stopping.wait(0.5)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()


class EventListener(Listener):
    """The last committed seq of each run (NOTIFY ``run_id seq`` on every commit)."""

    def __init__(self, dsn: str, connect_timeout: float, channel: str):
        super().__init__(dsn, connect_timeout, (channel,), "chainlab-postgres-listener")
        self.heads: dict[str, int] = {}
        self.commits = 0  # notifications seen, of any run

    def note(self, channel: str, payload: str) -> None:
        run_id, _, seq = payload.rpartition(" ")
        self.commits += 1
        if int(seq) > self.heads.get(run_id, 0):
            self.heads[run_id] = int(seq)

    def wait_for(self, run_id: str, after_seq: int, timeout: float) -> bool:
        return self.wait(lambda: self.heads.get(run_id, 0) > after_seq, timeout)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        self.wait(lambda: self.commits > seen, timeout)
        return self.commits


class MailListener(Listener):
    """The newest request id of each run and the answered request ids."""

    def __init__(self, dsn: str, connect_timeout: float, requests: str, answers: str):
        super().__init__(dsn, connect_timeout, (requests, answers), "chainlab-postgres-mail")
        self.requests = requests
        self.heads: dict[str, int] = {}
        self.answered: set[int] = set()

    def note(self, channel: str, payload: str) -> None:
        if channel == self.requests:
            run_id, _, request_id = payload.rpartition(" ")
            self.heads[run_id] = max(self.heads.get(run_id, 0), int(request_id))
        else:
            if len(self.answered) > 100_000:  # waiters re-read the store on timeout
                self.answered.clear()
            self.answered.add(int(payload))


class PostgresWatching:
    """The PostgreSQL store's waits for commits (a base of PostgresStore): one
    :class:`EventListener` per store, started by the first wait."""

    dsn: str
    connect_timeout: float
    _listener: EventListener | None
    _writer_lock: Any
    _closed: bool

    def wait_for_events(self, run_id: str, after_seq: int, timeout: float) -> bool:
        """Block until events of ``run_id`` after ``after_seq`` may have been committed (a
        NOTIFY said so) or ``timeout`` seconds passed; True when woken by a notification.
        The first call starts listening and returns True at once: read the log after it,
        so nothing committed between the read and the wait is missed."""
        if self._listener is None:
            self._listen()
            return True
        return self._listener.wait_for(run_id, after_seq, timeout)

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Block until events of any run were committed after ``seen`` notifications (the
        count this returned last time; -1 the first time) or ``timeout`` seconds passed;
        returns the count now. The first call starts listening and returns at once."""
        if self._listener is None:
            self._listen()
            return self._listener.commits if self._listener is not None else 0
        return self._listener.wait_for_commit(seen, timeout)

    def _listen(self) -> None:
        with self._writer_lock:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if self._listener is None:
                self._listener = EventListener(self.dsn, self.connect_timeout, CHANNEL)
                self._listener.start()
                self._listener.ready.wait(self.connect_timeout)

