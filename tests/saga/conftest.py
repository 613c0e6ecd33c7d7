"""Fixtures for the saga tests: a toolbox whose steps create records in a fake "world" and
whose compensations delete or release them, with switches to make a step or a compensation
fail, and gates (anyio Events set from the run's event stream) that make the order in which
parallel steps finish deterministic without any wall-clock sleep."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from chainlab import CallContext, Chain, PermanentError, Toolbox, TransientError
from chainlab.events import Event
from chainlab.events.status import RUN_TERMINAL
from chainlab.runtime import Run, RunResult, RunState, Runtime
from chainlab.store import MemoryStore
from chainlab.testing import EventRecorder, ManualClock

_ENDS = ("step_succeeded", "step_failed", "step_in_doubt", "step_cancelled", "step_rejected")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def chain_of(*steps: dict[str, Any], name: str = "saga", **options: Any) -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps), "options": options})


def step(step_id: str, deps: Sequence[str] = (), *, after: Sequence[str] = (),
         started: Sequence[str] = (), tool: str = "create", **extra: Any) -> dict[str, Any]:
    """A ``create`` step named after its id. ``after``: its call returns only once those steps
    ended; ``started``: only once those steps started (gates on the event stream)."""
    args: dict[str, Any] = {"name": step_id}
    if after:
        args["after"] = list(after)
    if started:
        args["started"] = list(started)
    args.update(extra.pop("args", {}))
    return {"id": step_id, "tool": tool, "depends_on": list(deps), "args": args, **extra}


@dataclass(frozen=True, slots=True)
class Undo:
    """One call of a compensation tool, as the tool saw it."""

    tool: str
    name: str
    step_id: str
    attempt: int
    key: str
    kind: str
    epoch: int
    ok: bool


class Saga:
    """Toolbox + in-memory runtime + the world the tools change.

    * ``create(name)`` (side effects, idempotent) adds ``name`` to ``world`` and returns
      ``{"id": "rec-<name>", "name": name}``; its ``compensate`` default is
      ``delete(id={{ output.id }})``. It fails (PermanentError) when ``name in fail``.
    * ``delete(id)`` and ``release(hold, note)`` remove the record; they raise TransientError
      while the record's name is in ``broken`` (so the default policy retries 3 times).
    * ``undo_log``: every compensation call in order (succeeded or not).
    """

    def __init__(self) -> None:
        self.toolbox = Toolbox("saga")
        self.clock = ManualClock()
        self.store = MemoryStore()
        self.runtime = Runtime(self.toolbox, self.store, clock=self.clock)
        self.rec = EventRecorder()
        self.started: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)
        self.ended: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)
        self.fail: set[str] = set()
        self.broken: set[str] = set()
        self.world: set[str] = set()
        self.created: list[str] = []
        self.undo_log: list[Undo] = []
        self._register()

    # ------------------------------------------------------------------ tools
    def _register(self) -> None:
        saga = self

        async def create(name: str, after: list[str] | None = None,
                         started: list[str] | None = None) -> dict[str, str]:
            for sid in started or ():
                await saga.started[sid].wait()
            for sid in after or ():
                await saga.ended[sid].wait()
            await anyio.sleep(0)
            if name in saga.fail:
                raise PermanentError(f"create {name!r} refused (injected)")
            saga.world.add(name)
            saga.created.append(name)
            return {"id": f"rec-{name}", "name": name}

        async def delete(id: str, ctx: CallContext) -> dict[str, str]:
            return saga._undo("delete", id.removeprefix("rec-"), ctx)

        async def release(hold: str, note: str, ctx: CallContext) -> dict[str, str]:
            assert note == f"{hold.removeprefix('rec-')} undone", note  # input interpolated
            return saga._undo("release", hold.removeprefix("rec-"), ctx)

        self.toolbox.tool(delete, side_effects=True, idempotent=True)
        self.toolbox.tool(release, side_effects=True, idempotent=True)
        self.toolbox.tool(create, side_effects=True, idempotent=True,
                          retry={"max_attempts": 1},
                          compensate=("delete", {"id": "{{ output.id }}"}))

    def _undo(self, tool: str, name: str, ctx: CallContext) -> dict[str, str]:
        ok = name not in self.broken
        self.undo_log.append(Undo(tool, name, ctx.step_id, ctx.attempt, ctx.idempotency_key,
                                  ctx.kind, ctx.epoch, ok))
        if not ok:
            raise TransientError(f"cannot undo {name!r} (injected)")
        self.world.discard(name)
        return {"undone": name}

    # ------------------------------------------------------------------ runs
    def add_chain(self, chain: Chain) -> None:
        """Make ``chain`` usable as a sub-chain."""
        self.toolbox.add_chain(chain)

    def watch(self, event: Event) -> None:
        self.rec(event)
        if event.step_id is None:
            return
        if event.kind == "step_started":
            self.started[event.step_id].set()
        elif event.kind in _ENDS:
            self.ended[event.step_id].set()

    async def start(self, chain: Chain, context: dict[str, Any] | None = None,
                    **kw: Any) -> Run:
        run = await self.runtime.start(chain, context, **kw)
        run.subscribe(self.watch)
        return run

    async def run(self, chain: Chain, **kw: Any) -> tuple[Run, RunResult]:
        run = await self.start(chain, **kw)
        with anyio.fail_after(10):
            return run, await run.wait()

    # ------------------------------------------------------------------ reading the log
    def events(self, run: Run) -> list[Event]:
        return self.store.load_events(run.run_id)

    def compensation_order(self, run: Run) -> list[str]:
        """Step ids in the order their compensations started (retries folded)."""
        return [sid for rnd in self.rollback_rounds(run) for sid in rnd]

    def rollback_rounds(self, run: Run) -> list[list[str]]:
        """Per rollback (each ``run_rollback_started``): step ids in the order their
        compensations started, a step's retries folded into one entry."""
        rounds: list[list[str]] = []
        for ev in self.events(run):
            if ev.kind == "run_rollback_started":
                rounds.append([])
            elif ev.kind == "compensation_started" and (not rounds[-1]
                                                         or rounds[-1][-1] != ev.step_id):
                rounds[-1].append(ev.step_id or "")
        return rounds

    def undo_order(self) -> list[str]:
        """Names in the order the compensation tools were called (retries folded)."""
        out: list[str] = []
        for u in self.undo_log:
            if not out or out[-1] != u.name:
                out.append(u.name)
        return out

    def fold(self, run: Run) -> RunState:
        return RunState.from_events(run.run_id, self.events(run), run.chain.step_ids)


@pytest.fixture
def saga() -> Saga:
    return Saga()


async def until_idle(run: Run) -> None:
    """Wait until this process's driver of ``run`` has really stopped.

    ``run.rollback()`` called right after ``run.wait()`` returned is dropped while the
    finishing driver unwinds (lead: run.py bug, see
    test_rollback.py::test_rollback_right_after_wait_is_not_dropped); tests that roll back a
    finished run call this first so they test the saga, not that race.
    """
    kernel = run._kernel
    with anyio.fail_after(5):
        while kernel is not None and kernel.driving:
            await anyio.sleep(0)


async def until_terminal(run: Run) -> RunResult:
    """The run's result once it is terminal and its driver stopped.

    ``run.wait()`` right after ``cancel()``/``rollback()`` of a SUSPENDED run returns at once
    with the stale ``suspended`` status (lead: run.py bug, see
    test_rollback.py::test_wait_after_cancel_of_a_suspended_run_waits_for_the_end), so the
    tests of that path wait here instead.
    """
    with anyio.fail_after(5):
        while run.status not in RUN_TERMINAL:
            await anyio.sleep(0)
    await until_idle(run)
    return run.result()


def statuses(run: Run) -> dict[str, str]:
    return {sid: str(st.status) for sid, st in run.steps.items()}
