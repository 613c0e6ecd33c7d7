"""PostgresStore beyond the shared contract: opening by URL, psycopg errors mapped once to
StoreServerError (cause and fix), migrations, a dropped connection, NOTIFY on commit."""

from __future__ import annotations

import threading
from urllib.parse import quote

import pytest

from chainlab.errors import StaleEpochError, StoreError, StoreServerError
from chainlab.store import open_store
from tests.pg import Cluster, Unavailable

from .conftest import ev, record

pytestmark = pytest.mark.anyio
psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def dsn(pg_cluster: Cluster) -> str:
    return pg_cluster.dsn()


def url_of(cluster: Cluster, schema: str, dbname: str = "chainlab_test") -> str:
    cluster.dsn(schema)
    return (f"postgresql://postgres:secret@/{dbname}?host={quote(str(cluster.socket_dir))}"
            f"&options={quote(f'-csearch_path={schema}')}")


def test_open_store_gives_a_postgres_store_for_postgresql_urls(pg_cluster: Cluster) -> None:
    from chainlab.store.postgres import PostgresStore

    for scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        url = url_of(pg_cluster, f"open_{scheme.replace('+', '_')}").replace(
            "postgresql", scheme, 1)
        store = open_store(url)
        try:
            assert isinstance(store, PostgresStore)
            assert "secret" not in repr(store) and "chainlab_test" in repr(store)
            store.create_run(record())
            assert store.get_run("r1") == record()
        finally:
            store.close()


def test_an_unreachable_server_names_the_fix(tmp_path: object) -> None:
    with pytest.raises(StoreServerError) as info:
        open_store(f"postgresql://me:secret@/runs?host={tmp_path}")
    err = info.value
    assert err.fault == "unreachable" and isinstance(err.__cause__, psycopg.OperationalError)
    assert str(err).startswith(f"cannot reach the PostgreSQL server for database 'runs' on "
                               f"{tmp_path} as me (")
    assert str(err).endswith("; start the server (or check host, port and socket directory "
                             "in the URL), then try again")
    assert "secret" not in str(err)


def test_a_missing_database_and_a_refused_login(pg_cluster: Cluster) -> None:
    host = quote(str(pg_cluster.socket_dir))
    with pytest.raises(StoreServerError) as info:
        open_store(f"postgresql://postgres@/nope?host={host}")
    assert info.value.fault == "no_database"
    assert "create it (createdb NAME" in str(info.value)
    with pytest.raises(StoreServerError) as info:
        open_store(f"postgresql://nobody:pw@/chainlab_test?host={host}")
    assert info.value.fault == "credentials" and "pg_hba.conf" in info.value.fix
    assert "pw@" not in str(info.value)


def test_migrations_are_recorded_and_a_newer_schema_is_refused(dsn: str) -> None:
    from chainlab.store.postgres import PostgresStore
    from chainlab.store.postgres.schema import MIGRATIONS

    with PostgresStore(dsn) as store:
        assert store.schema_version == len(MIGRATIONS)
    with PostgresStore(dsn) as store:  # opening again migrates nothing
        assert store.query("SELECT version FROM chainlab_schema_version ORDER BY 1") == [
            (v,) for v in range(1, len(MIGRATIONS) + 1)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO chainlab_schema_version VALUES (%s)", (len(MIGRATIONS) + 1,))
    with pytest.raises(StoreServerError) as info:
        PostgresStore(dsn)
    assert info.value.fault == "newer_schema"
    assert f"schema version {len(MIGRATIONS) + 1}, newer than this chainlab understands " \
           f"({len(MIGRATIONS)})" in str(info.value)


def test_two_stores_opening_a_new_database_at_once_migrate_it_once(dsn: str) -> None:
    from chainlab.store.postgres import PostgresStore

    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            PostgresStore(dsn).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


async def test_a_dropped_connection_fails_that_writer_and_loses_nothing_committed(
        dsn: str) -> None:
    from chainlab.store.postgres import PostgresStore

    store = PostgresStore(dsn)
    try:
        store.create_run(record())
        store.append("r1", 1, [ev(1), ev(2)])
        await store.flush("r1", 1)
        assert store._writer is not None
        writer = store._writer._commit.__self__  # type: ignore[attr-defined]  # its _PostgresWriter
        assert writer.conn is not None
        pid = writer.conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:  # the server drops it
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        store.append("r1", 1, [ev(3)])
        with pytest.raises(StoreServerError) as info:
            await store.flush("r1", 1)
        err = info.value
        assert err.fault == "dropped"
        assert "nothing after seq 2 of run 'r1' was saved" in str(err)
        assert "resume the run" in err.fix
        store.append("r1", 1, [ev(3)])  # that writer stays failed: no gap can be reported
        with pytest.raises(StoreServerError):
            await store.flush("r1", 1)
        # the database is fine: a new owner takes over and writes on (a new connection)
        assert [e.seq for e in store.load_events("r1")] == [1, 2]
        assert store.claim("r1", 1, expected_seq=2) == 2
        store.append("r1", 2, [ev(3, epoch=2)])
        await store.flush("r1", 2)
        assert [(e.seq, e.epoch) for e in store.load_events("r1")] == [(1, 1), (2, 1), (3, 2)]
    finally:
        store.close()


async def test_reads_survive_a_dropped_pooled_connection(dsn: str) -> None:
    from chainlab.store.postgres import PostgresStore

    with PostgresStore(dsn, pool_size=1) as store:
        store.create_run(record())
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "application_name = '' AND pid <> pg_backend_pid() AND "
                          "datname = current_database()")
        assert store.get_run("r1").run_id == "r1"


async def test_commits_notify_watchers_with_the_last_seq(dsn: str) -> None:
    from chainlab.store.postgres import CHANNEL, PostgresStore

    with PostgresStore(dsn) as store, psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        store.create_run(record())
        store.append("r1", 1, [ev(1), ev(2)])
        store.append("r1", 1, [ev(3)])
        await store.flush("r1", 1)
        store.claim("r1", 1)
        store.append("r1", 1, [ev(4)])  # refused: no notification
        with pytest.raises(StaleEpochError):
            await store.flush("r1", 1)
        notes = [n.payload for n in listener.notifies(timeout=1.0, stop_after=5)]
        assert notes in (["r1 3"], ["r1 2", "r1 3"])  # one per commit, after it
        assert store.wait_for_events("r1", 0, 1.0) is True  # starts listening
        store.append("r1", 2, [ev(4, epoch=2)])
        await store.flush("r1", 2)
        assert store.wait_for_events("r1", 3, 10.0) is True
        assert store.wait_for_events("r1", 4, 0.01) is False


def test_a_closed_store_refuses_work(dsn: str) -> None:
    from chainlab.store.postgres import PostgresStore

    store = PostgresStore(dsn)
    store.close()
    store.close()  # twice is fine
    with pytest.raises(StoreError, match="is closed"):
        store.get_run("r1")
    with pytest.raises(StoreError, match="is closed"):
        store.append("r1", 1, [ev(1)])


def test_the_first_reads_and_writes_after_a_server_restart_succeed() -> None:
    """Issue 44: after a restart, the first read through each pooled connection raised
    StoreServerError (a long-lived widget or script saw one per stale connection). The
    store checks a pooled connection before use (``chainlab.store.postgres.pool.lend``),
    so neither a read nor a write meets a dropped one (benchmarks/bench_pg_pool.py: what
    it costs, and why not psycopg_pool's own check=). A cluster of this test's own:
    restarting drops every connection."""
    from chainlab.store.postgres import PostgresStore

    try:
        cluster = Cluster().start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    try:
        with PostgresStore(cluster.dsn(), pool_size=4) as store:
            store.create_run(record())
            held = [store._pool.getconn() for _ in range(4)]  # four pooled connections
            for conn in held:
                store._pool.putconn(conn)
            cluster.restart()
            for _ in range(6):  # more reads than stale connections, each must answer
                assert store.get_run("r1").run_id == "r1"
                assert [r.run_id for r in store.list_runs()] == ["r1"]
            store.create_run(record("r2"))  # a write through the pool too
            assert store.get_run("r2").run_id == "r2"
    finally:
        cluster.stop()
