"""DaskExecutor on an in-process LocalCluster: tool bodies run on workers, scheduling stays in
the runtime, timeouts and cancellation reach the cluster, worker errors are classified like
local ones, and unserialisable calls fail with a clear message."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

distributed = pytest.importorskip("distributed")

import chainlab  # noqa: E402
from chainlab import CallContext, Chain, PermanentError, Toolbox, TransientError  # noqa: E402
from chainlab.dask import DaskExecutor  # noqa: E402
from chainlab.runtime import LocalExecutor, RunStatus, Runtime  # noqa: E402
from chainlab.store import MemoryStore  # noqa: E402
from chainlab.testing import ManualClock  # noqa: E402
from tests.dask_ledger import cluster_client  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with cluster_client(n_workers=2, threads_per_worker=2, processes=False) as client:
        yield client


# ---------------------------------------------------------------------------- tools
toolbox = Toolbox("dask-tests")
GATE = threading.Event()  # released at the end of the tests that block a worker
STARTED = threading.Event()  # set by a blocked body once it runs on a worker
MAIN_THREAD = threading.main_thread()


@toolbox.tool
def where(i: int) -> dict[str, Any]:
    """Say which worker and thread ran the body."""
    return {"i": i, "worker": distributed.get_worker().address,
            "thread": threading.current_thread().name}


@toolbox.tool
def total(parts: list[dict[str, Any]]) -> int:
    return sum(p["i"] for p in parts)


@toolbox.tool
async def on_loop() -> bool:
    return threading.current_thread() is MAIN_THREAD


@toolbox.tool
def blocked(seconds: float = 30.0) -> str:
    STARTED.set()
    GATE.wait(seconds)
    return "released"


@toolbox.tool
def keyed(ctx: CallContext) -> dict[str, Any]:
    return {"step": ctx.step_id, "attempt": ctx.attempt, "key": ctx.idempotency_key}


class BadInit(Exception):
    """An exception that pickles but cannot be unpickled (its __init__ needs two args)."""

    def __init__(self, a: str, b: str):
        super().__init__(f"{a}/{b}")


@toolbox.tool
def raises(what: str, ctx: CallContext) -> str:
    if what == "transient_once" and ctx.attempt == 1:
        raise TransientError("rate limited")
    if what == "permanent":
        raise PermanentError("no such account")
    if what == "value":
        raise ValueError("bad value 42")
    if what == "timeout":
        raise TimeoutError("upstream timed out")
    if what == "bad_init":
        raise BadInit("x", "y")
    if what == "before_effect":
        raise TransientError("quota", before_effect=True)
    return "ok"


@toolbox.tool(side_effects=True)
def unsafe_raises(what: str) -> str:
    raise ValueError(f"unknown outcome {what}")


@toolbox.tool
def returns_lock() -> Any:
    return threading.Lock()


def _closure_over_lock() -> Any:
    lock = threading.Lock()

    def holds_lock(x: int) -> int:
        with lock:
            return x

    return holds_lock


toolbox.tool(_closure_over_lock(), name="holds_lock")


def chain_of(*steps: dict[str, Any], **options: Any) -> Chain:
    return Chain.from_dict({"name": "dask-test", "steps": list(steps), "options": options})


def step(step_id: str, tool: str, **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "args": args, "retry": {"max_attempts": 2,
                                                                "delay_s": 0.01}}


async def run_with(executor: Any, chain: Chain) -> Any:
    runtime = Runtime(toolbox, MemoryStore(), executor=executor, clock=ManualClock())
    run = await runtime.start(chain)
    result = await run.wait()
    await runtime.aclose()
    return run, result


# ---------------------------------------------------------------------------- tests
async def test_fan_out_bodies_run_on_workers(client: Any) -> None:
    n = 24
    chain = chain_of(
        *(step(f"w{i}", "where", i=i) for i in range(n)),
        {"id": "sum", "tool": "total",
         "args": {"parts": [f"{{{{ steps.w{i}.output }}}}" for i in range(n)]}},
        max_concurrency=6)
    executor = DaskExecutor(client)
    run, result = await run_with(executor, chain)
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["sum"] == sum(range(n))
    workers = set(client.scheduler_info()["workers"])
    for i in range(n):
        out = result.outputs[f"w{i}"]
        assert out["worker"] in workers
        assert "Dask" in out["thread"] and out["thread"] != MAIN_THREAD.name
    assert len({result.outputs[f"w{i}"]["worker"] for i in range(n)}) >= 1
    subs = list(executor.submissions)
    assert len(subs) == n + 1 and {s.outcome for s in subs} == {"finished"}
    assert {s.step_id for s in subs} == {f"w{i}" for i in range(n)} | {"sum"}
    assert all(s.key.startswith(f"{s.tool}-") and s.run_id == run.run_id for s in subs)


async def test_async_tools_stay_on_the_loop(client: Any) -> None:
    executor = DaskExecutor(client)
    _, result = await run_with(executor, chain_of(step("a", "on_loop")))
    assert result.outputs["a"] is True
    assert list(executor.submissions) == []


async def test_call_context_reaches_the_worker(client: Any) -> None:
    _, result = await run_with(DaskExecutor(client), chain_of(step("k", "keyed")))
    out = result.outputs["k"]
    assert out["step"] == "k" and out["attempt"] == 1 and len(out["key"]) == 32


async def _key_gone(client: Any, key: str) -> bool:
    def has(dask_scheduler: Any, key: str = key) -> bool:
        ts = dask_scheduler.tasks.get(key)
        return ts is not None and ts.state not in ("released", "forgotten")

    for _ in range(200):
        if not await anyio.to_thread.run_sync(lambda: client.run_on_scheduler(has)):
            return True
        await anyio.sleep(0.02)
    return False


async def test_a_timeout_cancels_the_future(client: Any) -> None:
    GATE.clear()
    executor = DaskExecutor(client)
    chain = chain_of({"id": "slow", "tool": "blocked", "timeout_s": 0.3,
                      "retry": {"max_attempts": 1}})
    try:
        run, result = await run_with(executor, chain)
        [sub] = executor.submissions
        # checked while the body still blocks its worker thread: only a cancel frees the key
        gone = await _key_gone(client, sub.key)
    finally:
        GATE.set()
    assert result.status == RunStatus.FAILED
    st = run.steps["slow"]
    assert st.error_kind == "timeout" and st.attempts == 1, st.error
    assert sub.outcome == "cancelled" and sub.step_id == "slow"
    assert gone


async def test_cancelling_the_run_cancels_the_future(client: Any) -> None:
    GATE.clear()
    STARTED.clear()
    executor = DaskExecutor(client)
    runtime = Runtime(toolbox, MemoryStore(), executor=executor)
    try:
        run = await runtime.start(chain_of(step("slow", "blocked")))
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(STARTED.wait)
        await run.cancel()
        result = await run.wait()
        [sub] = executor.submissions
        gone = await _key_gone(client, sub.key)
    finally:
        GATE.set()
        await runtime.aclose()
    assert result.status == RunStatus.CANCELLED
    assert sub.outcome == "cancelled"
    assert gone


def _summary(run: Any) -> list[tuple[Any, ...]]:
    return [(st.step_id, str(st.status), st.error_kind, st.error, st.attempts,
             [(a.attempt, str(a.status), a.error_kind, a.error)
              for a in run.state.attempts if a.step_id == st.step_id])
            for st in run.steps.values()]


@pytest.mark.parametrize("what,status,kind", [
    ("transient_once", "succeeded", None),
    ("permanent", "failed", "permanent"),
    ("value", "failed", "execution_failed"),
    ("timeout", "failed", "transient"),
    ("bad_init", "failed", "execution_failed"),
    ("before_effect", "failed", "transient"),
])
async def test_worker_errors_are_classified_like_local_ones(
        client: Any, what: str, status: str, kind: str | None) -> None:
    chain = chain_of(step("x", "raises", what=what), on_failure="continue")
    local_run, _ = await run_with(LocalExecutor(), chain)
    dask_run, _ = await run_with(DaskExecutor(client), chain)
    assert _summary(dask_run) == _summary(local_run)
    st = dask_run.steps["x"]
    assert (str(st.status), st.error_kind) == (status, kind)


async def test_unsafe_tool_failing_on_a_worker_is_in_doubt_like_locally(client: Any) -> None:
    chain = chain_of(step("pay", "unsafe_raises", what="charge"))
    local_run, local = await run_with(LocalExecutor(), chain)
    dask_run, remote = await run_with(DaskExecutor(client), chain)
    assert remote.status == local.status == RunStatus.SUSPENDED
    assert _summary(dask_run) == _summary(local_run)
    assert dask_run.steps["pay"].status == "in_doubt"


async def test_unserialisable_call_fails_before_submitting(client: Any) -> None:
    executor = DaskExecutor(client)
    run, result = await run_with(executor, chain_of(step("h", "holds_lock", x=1)))
    st = run.steps["h"]
    assert result.status == RunStatus.FAILED and st.error_kind == "permanent"
    assert st.attempts == 1  # permanent: never retried
    assert "step 'h' (tool 'holds_lock')" in st.error
    assert "not serialisable" in st.error and "holds_lock" in st.error
    assert list(executor.submissions) == []


async def test_unserialisable_output_is_a_clear_error(client: Any) -> None:
    chain = chain_of({"id": "r", "tool": "returns_lock", "retry": {"max_attempts": 1}})
    run, result = await run_with(DaskExecutor(client), chain)
    st = run.steps["r"]
    assert result.status == RunStatus.FAILED and st.error_kind == "execution_failed"
    assert "step 'r' (tool 'returns_lock')" in st.error
    assert "cannot be sent back" in st.error


async def test_an_asynchronous_client_on_the_same_loop(client: Any) -> None:
    address = client.scheduler.address
    async with distributed.Client(address, asynchronous=True) as aclient:
        executor = DaskExecutor(aclient)
        _, result = await run_with(executor, chain_of(step("a", "where", i=7)))
    assert result.status == RunStatus.SUCCEEDED and result.outputs["a"]["i"] == 7
    assert [s.outcome for s in executor.submissions] == ["finished"]


@toolbox.tool(side_effects=True)
def effect(n: int) -> int:
    EFFECTS.append(n)
    return n


EFFECTS: list[int] = []


async def test_a_second_start_of_one_attempt_refuses(client: Any) -> None:
    """The claim: the same attempt (run, step, kind, attempt, epoch) sent twice runs once;
    the second start is refused before the tool is called, as a lost call (unknown
    outcome); an older epoch of the run is refused once a newer one claimed."""
    EFFECTS.clear()
    executor, other = DaskExecutor(client), DaskExecutor(client)  # one registry for both
    tool = toolbox.get("effect")
    ctx = CallContext("run-claims", "pay", 1, "key", 2, "call", {})
    assert await executor.call(tool, {"n": 1}, ctx) == 1
    with pytest.raises(TransientError, match="second start of this attempt") as refused:
        await other.call(tool, {"n": 1}, ctx)
    assert refused.value.before_effect is False and "already claimed by " in str(
        refused.value)
    stale = CallContext("run-claims", "pay", 2, "key", 1, "call", {})
    with pytest.raises(TransientError, match="epoch 1 is stale"):
        await executor.call(tool, {"n": 2}, stale)
    # another attempt, or a compensation of the same attempt number, is another claim
    assert await executor.call(tool, {"n": 3}, CallContext("run-claims", "pay", 2, "key", 2,
                                                           "call", {})) == 3
    assert await executor.call(tool, {"n": 4}, CallContext("run-claims", "pay", 1, "key", 2,
                                                           "compensation", {})) == 4
    assert EFFECTS == [1, 3, 4]
    assert [s.outcome for s in other.submissions] == ["lost"]


async def test_a_scheduler_that_cannot_take_the_claims_fails_the_step_before_any_call(
        client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin the scheduler cannot load (as on a scheduler without chainlab): the step
    fails, permanent and before any effect, naming the fix; no task was submitted."""
    import chainlab.dask as dask_module

    monkeypatch.setattr(dask_module, "_dask_dumps", lambda plugin: b"not a pickle")
    executor = DaskExecutor(client)
    run, result = await run_with(executor, chain_of(step("pay", "effect", n=1)))
    st = run.steps["pay"]
    assert result.status == RunStatus.FAILED and st.error_kind == "permanent"
    assert "the scheduler needs chainlab installed" in st.error
    assert list(executor.submissions) == []


def test_the_claim_registry_is_bounded() -> None:
    """Claims of live tasks are kept; of ended ones the last ``keep``; epochs per run too."""
    from chainlab.dask.claims import AttemptClaims

    class FakeScheduler:
        def __init__(self) -> None:
            self.tasks: dict[str, object] = {}
            self.handlers: dict[str, Any] = {}

    registry, scheduler = AttemptClaims(keep=2), FakeScheduler()
    registry.start(scheduler)
    assert scheduler.handlers["chainlab_claim_attempt"] == registry.claim
    scheduler.tasks.update({"t1": 1, "t2": 2, "t3": 3})
    for i in (1, 2, 3):
        assert registry.claim(f"a{i}", f"run{i}", 1, "w", f"t{i}") == {"ok": True}
    assert registry.claim("a1", "run1", 1, "w2", "t1")["ok"] is False  # live: kept
    assert list(registry.epochs) == ["run2", "run3"]  # the last `keep` runs
    for key in ("t1", "t2", "t3"):
        registry.transition(key, "released", "forgotten")
    assert set(registry.claims) == {"a2", "a3"} and registry.live == {}
    assert registry.claim("a3", "run3", 1, "w2", "t9") == {
        "ok": False, "why": "attempt already claimed by w"}
    assert registry.claim("a4", "run3", 0, "w", "t4") == {
        "ok": False, "why": "epoch 0 is stale (the run is at 1)"}


def test_only_chainlab_dask_imports_dask() -> None:
    root = Path(chainlab.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.parent == root / "dask":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            offenders += [f"{path.relative_to(root)}: {n}" for n in names
                          if n.split(".")[0] in ("dask", "distributed")]
    assert offenders == []
