"""LISTEN/NOTIFY for the PostgreSQL store: one :class:`Listener` thread per store and
concern, that LISTENs on its channels, folds each notification into what it knows (the last
committed seq of each run; the newest request of each run and the answered requests) and wakes
whoever waits. It reconnects after a dropped connection; waiters time out and read the
store themselves meanwhile, so a lost notification costs a poll, never an event."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import psycopg

__all__ = ["EventListener", "Listener", "MailListener"]


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
