"""An IPython InteractiveShell harness that runs cells the way ipykernel does: synchronous
cells are called from inside the running asyncio loop, cells with a top-level ``await`` run
as coroutines on that loop, and the session drives its runs on a loop of their own (the
process's :class:`~chainlab.jupyter.runloop.RunLoop`), as in a kernel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell

import chainlab
from chainlab.jupyter import load_ipython_extension
from chainlab.jupyter import session as session_module
from chainlab.jupyter._loop import pending_tasks
from chainlab.jupyter.runloop import RunLoop


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Harness:
    """One shell, cells run like in a kernel, displays captured."""

    def __init__(self, ip: InteractiveShell, tmp_path: Path):
        self.ip = ip
        self.tmp_path = tmp_path
        self.pub = CapturingDisplayPublisher()
        ip.display_pub = self.pub

    @property
    def ns(self) -> dict[str, Any]:
        return self.ip.user_ns

    @property
    def session(self) -> session_module.NotebookSession:
        return session_module.get_session(self.ip)

    async def cell(self, code: str) -> ExecutionResult:
        # store_history: each cell gets its own execution count, as in a kernel
        transformed = self.ip.transform_cell(code)
        if self.ip.should_run_async(code, transformed_cell=transformed):
            return await self.ip.run_cell_async(code, store_history=True,
                                                transformed_cell=transformed)
        return self.ip.run_cell(code, store_history=True)

    async def ok(self, code: str) -> Any:
        """Run a cell that must succeed; returns the value of its last expression."""
        result = await self.cell(code)
        if not result.success:
            err = result.error_before_exec or result.error_in_exec
            raise AssertionError(f"cell failed: {err!r}\n{code}")
        return result.result

    async def usage_error(self, code: str) -> str:
        """Run a cell that must fail with a UsageError (never another exception)."""
        result = await self.cell(code)
        err = result.error_in_exec or result.error_before_exec
        assert isinstance(err, UsageError), f"expected a UsageError, got {err!r}"
        return str(err)

    def displayed(self, mime: str = "text/plain") -> list[str]:
        """What was displayed so far (``mime`` of each output), then forget it. A run
        widget's static picture (the output after its view, for exports; a live front end
        hides it next to the live widget) is left out: :meth:`pictures` has those."""
        out = [d["data"].get(mime, "") for d in self.pub.outputs if not is_picture(d)]
        self.pub.outputs.clear()
        return out

    def pictures(self) -> list[str]:
        """The ``text/html`` of the run widgets' static pictures displayed so far."""
        return [d["data"]["text/html"] for d in self.pub.outputs if is_picture(d)]

    async def settle(self) -> None:
        """Let background tasks started by buttons/magics finish their store flushes (on
        the run loop, and on this one), then what the run loop queued meanwhile (a
        redraw)."""
        for _ in range(1000):
            if not pending_tasks():
                break
            await asyncio.sleep(0.005)
        await RunLoop.shared().hop(lambda: asyncio.sleep(0))
        await asyncio.sleep(0)


def is_picture(output: dict[str, Any]) -> bool:
    """A run widget's static picture: its own output, under the widget's display id."""
    display_id = (output.get("transient") or {}).get("display_id") or ""
    return (display_id.startswith("chainlab-run-")
            and "application/vnd.jupyter.widget-view+json" not in output["data"])


@pytest.fixture(scope="session")
def _ip() -> InteractiveShell:
    ip = InteractiveShell.instance(cache_size=0)  # no Out[] cache keeping runs alive
    ip.run_line_magic("load_ext", "chainlab")
    return ip


def _fresh_namespace(ip: InteractiveShell) -> None:
    # ip.reset() would do the same plus a gc.collect() that costs ~0.1 s per call
    ip.user_ns.clear()
    ip.init_user_ns()


@pytest.fixture
async def sh(_ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             clean_default_toolbox: None) -> AsyncIterator[Harness]:
    monkeypatch.chdir(tmp_path)
    old_pub = _ip.display_pub
    _fresh_namespace(_ip)
    session_module._SESSIONS.pop(id(_ip), None)
    load_ipython_extension(_ip)  # a fresh session for this test
    # as in a kernel: the session drives its runs on a loop of their own (RunLoop)
    session_module.get_session(_ip).loop = RunLoop.shared()
    _ip.user_ns["chainlab"] = chainlab
    harness = Harness(_ip, tmp_path)
    try:
        yield harness
    finally:
        _ip.display_pub = old_pub
        for task in pending_tasks():
            task.cancel()
        session = session_module._SESSIONS.pop(id(_ip), None)
        if session is not None:
            for rt in session.runtimes.values():
                await rt.aclose()
            for w in session.widgets.values():
                w.close()
            session.close()
        _fresh_namespace(_ip)


@pytest.fixture
def clean_default_toolbox() -> Iterator[None]:
    """Tests may register tools with @chainlab.tool; put the default toolbox back after."""
    before = dict(chainlab.default_toolbox._tools)
    yield
    chainlab.default_toolbox._tools.clear()
    chainlab.default_toolbox._tools.update(before)


TOOLS = '''
import chainlab
from chainlab import Toolbox, TransientError
tb = Toolbox("shop")
calls = []

@tb.tool
def fetch(n: int) -> list:
    """Fetch n items."""
    calls.append(("fetch", n))
    return list(range(n))

@tb.tool(side_effects=True, requires_confirmation=True,
         preview=lambda a: f"send {len(a['items'])} items", compensate=("unsend", {}))
def send(items: list) -> str:
    calls.append(("send", len(items)))
    return f"sent {len(items)}"

@tb.tool(side_effects=True, idempotent=True)
def unsend() -> str:
    calls.append(("unsend",))
    return "unsent"

@tb.tool(side_effects=True, compensate=("unbook", {"ref": "{{ output }}"}))
def book(what: str) -> str:
    calls.append(("book", what))
    return f"ref-{what}"

@tb.tool(side_effects=True, idempotent=True)
def unbook(ref: str) -> str:
    calls.append(("unbook", ref))
    return "ok"
'''

SHOP = '''%%chain shop --tools tb
steps:
  - {id: get, tool: fetch, args: {n: 3}}
  - {id: out, tool: send, args: {items: "{{ steps.get.output }}"}}
'''

TRIP = '''%%chain trip --tools tb
steps:
  - {id: flight, tool: book, args: {what: flight}}
  - {id: hotel, tool: book, args: {what: hotel}, depends_on: [flight]}
  - {id: car, tool: book, args: {what: car}, depends_on: [hotel]}
'''


@pytest.fixture
async def shop(sh: Harness) -> Harness:
    """The harness with the toolbox ``tb`` and the chains ``shop`` and ``trip`` defined."""
    await sh.ok(TOOLS)
    await sh.ok(SHOP)
    await sh.ok(TRIP)
    sh.displayed()
    return sh
