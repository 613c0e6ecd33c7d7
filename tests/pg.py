"""A throwaway PostgreSQL server for the tests: Debian's binaries (``postgresql`` package,
``/usr/lib/postgresql/*/bin``), a new cluster in a temp dir, listening only on a unix socket
in that dir, run as the ``postgres`` user when the tests run as root (PostgreSQL refuses to
run as root), stopped at the end of the session.

``Cluster.start()`` raises :class:`Unavailable` with the reason when no server can be
started (no binaries, no psycopg, initdb or pg_ctl failing): tests skip with that reason.
Each test gets a schema of its own (``Cluster.dsn(schema)``: ``search_path`` set in the
connection string), which is far cheaper than a database per test.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

DATABASE = "chainlab_test"


class Unavailable(Exception):
    """No PostgreSQL server can be started here (the message says why)."""


def find_bindir() -> Path:
    """The newest Debian PostgreSQL bin directory (or the one holding ``initdb`` on PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    if which:
        return Path(which).parent
    raise Unavailable("no PostgreSQL server binaries (initdb): install Debian's `postgresql` "
                      "package (./run.sh test does)")


class Cluster:
    """A PostgreSQL cluster in a temp dir, on a unix socket only."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = fsync  # off for the tests (they kill clients, never the server)
        self.dir: Path | None = None
        self.started = False
        self._schemas = itertools.count(1)

    @property
    def socket_dir(self) -> Path:
        assert self.dir is not None
        return self.dir / "sock"

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        if shutil.which("runuser") is None:
            raise Unavailable("running as root and no `runuser` to start PostgreSQL as the "
                              "postgres user")
        return ["runuser", "-u", "postgres", "--", *argv]

    def _run(self, argv: list[str], what: str) -> None:
        proc = subprocess.run(self._as_owner(argv), capture_output=True, text=True,
                              timeout=120, cwd="/")
        if proc.returncode != 0:
            raise Unavailable(f"{what} failed ({proc.returncode}): "
                              f"{(proc.stderr or proc.stdout).strip()[-500:]}")

    def start(self) -> Cluster:
        try:
            import psycopg
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"psycopg is not installed ({exc}): pip install -e '.[postgres]'"
                              ) from exc
        bindir = find_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="chainlab-pg-"))
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            try:
                shutil.chown(self.dir, "postgres", "postgres")
                shutil.chown(self.socket_dir, "postgres", "postgres")
            except (LookupError, OSError) as exc:
                raise Unavailable(f"cannot hand {self.dir} to the postgres user: {exc}") from exc
        data = self.dir / "data"
        self._run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                   "-E", "UTF8", "--no-sync"], "initdb")
        options = (f"-k {self.socket_dir} -c listen_addresses='' "
                   f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=300")
        self._run([str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                   str(self.dir / "server.log"), "-w", "-t", "60", "start"], "pg_ctl start")
        self.started = True
        self.bindir = bindir
        import psycopg

        with psycopg.connect(self.base_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        return self

    def base_dsn(self, dbname: str = DATABASE) -> str:
        return f"host={self.socket_dir} user=postgres dbname={dbname}"

    def url(self, dbname: str = DATABASE) -> str:
        """The database as a ``postgresql://`` URL (what ``open_store`` and ``--db`` take)."""
        return f"postgresql://postgres@/{dbname}?host={quote(str(self.socket_dir))}"

    def dsn(self, schema: str | None = None) -> str:
        """A connection string to a NEW, empty schema of the test database."""
        import psycopg

        schema = schema or f"t{os.getpid()}_{next(self._schemas)}"
        with psycopg.connect(self.base_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self.base_dsn()} options='-csearch_path={schema}'"

    def restart(self) -> None:
        """Stop the server at once (as a crash would: every connection dropped) and start
        it again on the same data and socket."""
        assert self.dir is not None and self.started
        data = str(self.dir / "data")
        pg_ctl = str(self.bindir / "pg_ctl")
        self._run([pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], "pg_ctl stop")
        options = (f"-k {self.socket_dir} -c listen_addresses='' "
                   f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=300")
        self._run([pg_ctl, "-D", data, "-o", options, "-l", str(self.dir / "server.log"),
                   "-w", "-t", "60", "start"], "pg_ctl start")

    def stop(self) -> None:
        if self.dir is None:
            return
        if self.started:
            subprocess.run(self._as_owner([str(self.bindir / "pg_ctl"), "-D",
                                           str(self.dir / "data"), "-m", "immediate", "-w",
                                           "stop"]), capture_output=True, timeout=60, cwd="/")
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


_cluster: Cluster | None = None
_why_not: str | None = None


def shared_cluster() -> Cluster:
    """The session's cluster, started on first use; raises Unavailable (remembered) when
    none can be started. Stop it with :func:`stop_shared_cluster`."""
    global _cluster, _why_not
    if _why_not is not None:
        raise Unavailable(_why_not)
    if _cluster is None:
        cluster = Cluster()
        try:
            _cluster = cluster.start()
            atexit.register(stop_shared_cluster)  # also when no fixture asked to stop it
        except (Unavailable, OSError, subprocess.SubprocessError) as exc:
            cluster.stop()
            _why_not = f"no PostgreSQL server could be started: {exc}"
            raise Unavailable(_why_not) from exc
    return _cluster


def stop_shared_cluster() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


@contextlib.contextmanager
def server_url(url: str | None) -> Iterator[tuple[str | None, str | None]]:
    """For benchmarks: ``(url, None)`` when given one, else a throwaway fsync-on cluster's
    URL for the block; ``(None, why)`` when no server can be started."""
    if url is not None:
        yield url, None
        return
    cluster = Cluster(fsync=True)
    try:
        try:
            cluster.start()
        except Unavailable as exc:
            yield None, str(exc)
            return
        yield cluster.url(), None
    finally:
        cluster.stop()
