"""Outputs are stored as JSON (DESIGN §7): pydantic models are dumped, and an output that is
not JSON data fails its step with an error naming the step, the tool and where the bad
value sits, for every store. A completed step's stored output is what a resumed run uses."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore, Store

from .conftest import make_store

pytestmark = pytest.mark.anyio


class Invoice(BaseModel):
    number: int
    due: dt.date
    lines: list[str]


def toolbox(calls: list[str]) -> Toolbox:
    tb = Toolbox("outputs")

    @tb.tool
    async def invoice() -> Invoice:
        calls.append("invoice")
        return Invoice(number=7, due=dt.date(2030, 1, 31), lines=["a", "b"])

    @tb.tool
    async def untyped(kind: str) -> Any:
        calls.append(kind)
        if kind == "object":
            return object()
        if kind == "nested":
            return {"ok": 1, "rows": [{"when": dt.datetime(2030, 1, 1)}]}
        return float("nan")

    @tb.tool
    async def total(inv: dict[str, Any]) -> int:
        return inv["number"] * 2

    return tb


async def run_chain(store: Store, steps: list[dict[str, Any]], calls: list[str]) -> Any:
    runtime = Runtime(toolbox(calls), store)
    run = await runtime.start(Chain.from_dict({"name": "out", "steps": steps}), run_id="r")
    with anyio.fail_after(10):
        result = await run.wait()
    await runtime.aclose()
    return run, result


@pytest.mark.parametrize("kind", ["memory", "sqlite-file", "sqlite-memory"])
@pytest.mark.parametrize("bad, where", [("object", "object"), ("nested", "rows[0].when"),
                                        ("nan", "nan")])
async def test_an_output_that_is_not_json_fails_its_step(kind: str, bad: str, where: str,
                                                        tmp_path: Path) -> None:
    store = make_store(kind, tmp_path)
    run, result = await run_chain(store, [{"id": "bad_step", "tool": "untyped",
                                           "args": {"kind": bad}, "retry": {"max_attempts": 1}}],
                                  [])
    step = run.steps["bad_step"]
    assert (result.status, step.status, step.error_kind) == ("failed", "failed",
                                                             "execution_failed")
    assert "step 'bad_step'" in step.error and "'untyped'" in step.error
    assert "is refused (not JSON data" in step.error and where in step.error
    stored = [e for e in store.load_events("r") if e.kind == "step_failed"]
    assert [e.payload["error"] for e in stored] == [step.error]  # the failure itself is stored
    store.close()


async def test_pydantic_outputs_are_stored_dumped_and_never_recomputed(tmp_path: Path) -> None:
    calls: list[str] = []
    steps = [{"id": "inv", "tool": "invoice"},
             {"id": "sum", "tool": "total", "args": {"inv": "{{ steps.inv.output }}"}}]
    with SQLiteStore(tmp_path / "s.db") as store:
        _, result = await run_chain(store, steps, calls)
        assert result.ok
    dumped = {"number": 7, "due": "2030-01-31", "lines": ["a", "b"]}
    with SQLiteStore(tmp_path / "s.db") as store:  # another store object, as a new process
        out = [e.payload["output"] for e in store.load_events("r") if e.kind == "step_succeeded"]
        assert out == [dumped, 14]
        runtime = Runtime(toolbox(calls), store)
        again = await runtime.resume("r")
        assert (await again.wait()).outputs == {"inv": dumped, "sum": 14}
        await runtime.aclose()
    assert calls == ["invoice"]
