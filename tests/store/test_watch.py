"""``Runtime.watch``: process A drives a run, process B (this test) follows it live through
the store and sees every committed event once, in order (SQLite: poll by seq; PostgreSQL:
LISTEN/NOTIFY)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from chainlab.errors import RunNotFoundError
from chainlab.runtime import Runtime
from chainlab.store import Event, MemoryStore, open_store
from tests.store.watch_driver import STEPS

from .conftest import ev, record

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def store_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return str(tmp_path / "runs.db")
    from tests.pg import Unavailable, shared_cluster

    try:
        dsn = shared_cluster().dsn()
    except Unavailable as exc:
        pytest.skip(str(exc))
    # a libpq conninfo string is no URL: open_store only knows URLs and paths
    from urllib.parse import quote

    parts = dict(p.split("=", 1) for p in dsn.replace("options='", "options=").rstrip("'")
                 .split(" "))
    return (f"postgresql://{parts['user']}@/{parts['dbname']}?host={quote(parts['host'])}"
            f"&options={quote(parts['options'])}")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_another_process_sees_every_event_once_in_order(kind: str,
                                                              tmp_path: Path) -> None:
    url = store_url(kind, tmp_path)
    store = open_store(url)  # creates the schema before A starts
    driver = subprocess.Popen([sys.executable, "-m", "tests.store.watch_driver", url, "w1"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[Event] = []
    try:
        runtime = Runtime(store=store)
        with anyio.fail_after(120):
            while True:  # B may be faster than A's create_run
                try:
                    store.get_run("w1")
                    break
                except RunNotFoundError:
                    assert driver.poll() is None, driver.communicate()[0]
                    await anyio.sleep(0.01)
            async for event in runtime.watch("w1"):
                seen.append(event)
        out = driver.communicate(timeout=120)[0].decode()
        assert driver.returncode == 0, out
        assert out.strip().endswith("succeeded")
        stored = store.load_events("w1")
        assert seen == stored  # every committed event, once, in order
        assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
        assert seen[-1].kind == "run_succeeded"
        assert sum(e.kind == "step_succeeded" for e in seen) == STEPS
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        store.close()


async def test_watch_from_a_seq_and_follow_on_memory() -> None:
    store = MemoryStore()
    store.create_run(record())
    store.append("r1", 1, [ev(1, "run_started", step_id=None), ev(2)])
    runtime = Runtime(store=store)
    got: list[int] = []

    async def writer() -> None:
        for seq in (3, 4):
            await anyio.sleep(0.01)
            store.append("r1", 1, [ev(seq)])
        store.append("r1", 1, [ev(5, "run_succeeded", step_id=None)])
        await anyio.sleep(0.01)
        store.append("r1", 1, [ev(6, "run_rollback_started", step_id=None)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        with anyio.fail_after(10):
            async for e in runtime.watch("r1", after_seq=1, poll_interval=0.001):
                got.append(e.seq)
    assert got == [2, 3, 4, 5]  # stops after the event that ends the run
    followed: list[int] = []
    with anyio.fail_after(10):
        async for e in runtime.watch("r1", after_seq=4, follow=True, poll_interval=0.001):
            followed.append(e.seq)
            if e.seq == 6:
                break
    assert followed == [5, 6]
    with pytest.raises(RunNotFoundError):
        async for _ in runtime.watch("nope"):
            pass


async def test_an_idle_watch_backs_off_to_one_read_a_second() -> None:
    """A run that waits for a person commits nothing for hours: the poll slows from
    poll_interval to one read a second, and speeds up again when events come."""
    store = MemoryStore()
    store.create_run(record())
    store.append("r1", 1, [ev(1, "run_started", step_id=None)])
    reads: list[int] = []
    load = store.load_events

    def counting(run_id: str, after_seq: int = 0) -> list[Event]:
        reads.append(after_seq)
        return load(run_id, after_seq)

    store.load_events = counting  # type: ignore[method-assign]
    runtime = Runtime(store=store)
    got: list[int] = []

    async def writer() -> None:
        await anyio.sleep(2.0)  # idle: 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + ... about 6 reads
        idle_reads = len(reads)
        store.append("r1", 1, [ev(2), ev(3, "run_succeeded", step_id=None)])
        got.append(idle_reads)

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        with anyio.fail_after(10):
            seqs = [e.seq async for e in runtime.watch("r1", poll_interval=0.05)]
    assert seqs == [1, 2, 3]
    assert got[0] <= 10  # at a fixed 0.05 s it would be about 40 reads in those 2 s
