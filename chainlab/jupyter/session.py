"""The notebook session: which toolbox, which store, which runs and chains the magics see.

One :class:`NotebookSession` per IPython shell: a :class:`chainlab.workspace.Workspace` (the
stores, runtimes and run lookup every front end shares) plus the notebook's namespace. It
resolves names the way the magics document them (toolboxes and chains by variable name,
runs by id or by a variable holding one) and keeps strong references to the runs it started
(their tasks and widgets live as long as the kernel). Each store is opened once: ``--db``
(else ``CHAINLAB_DB``, else ``.chainlab/chainlab.db``), so ``:memory:`` is one MemoryStore
for the whole session and never a file.

In a kernel the session's runtimes drive their runs on a loop of their own
(:class:`~chainlab.jupyter.runloop.RunLoop`, a thread: a run moves on while later cells
execute); elsewhere (plain IPython, tests of the Python API) on the caller's loop.

Stores are read inline (``Workspace(inline_reads=True)``): SQLite reads take milliseconds,
so the runtime calls them on its loop's thread instead of a worker thread. That is what lets
``run = %chain run NAME`` hand back the Run handle at once (see
:mod:`chainlab.jupyter._loop`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from chainlab._text import did_you_mean
from chainlab.errors import StoreError, UsageError
from chainlab.jupyter._loop import eager
from chainlab.jupyter.runloop import LoopRuntime, RunLoop
from chainlab.plan.schema import Chain
from chainlab.runtime.runtime import Run, Runtime
from chainlab.store.base import FROM_META, Store
from chainlab.store.open import redacted
from chainlab.tools import Toolbox, default_toolbox
from chainlab.workspace import Workspace

__all__ = ["NotebookSession", "SessionError", "ShownRun", "get_session", "in_a_kernel"]

T = TypeVar("T")


def in_a_kernel() -> bool:
    """True inside a running ipykernel (a notebook, not plain IPython or a test)."""
    import sys

    kernelbase = sys.modules.get("ipykernel.kernelbase")
    return kernelbase is not None and kernelbase.Kernel.initialized()


class SessionError(UsageError):
    """A name the user gave does not resolve; the magics show it as an IPython UsageError."""


class ShownRun(Protocol):
    """What the session and the magics use of the widget that shows a run: the handle it
    shows, showing another handle of the same run (resumed, taken over), and its error line.
    The run widget is one; the session names it by this role because the widget imports the
    session."""

    @property
    def run(self) -> Run: ...

    def attach(self, run: Run) -> None: ...

    def show_error(self, exc: BaseException, action: str | None = None) -> None: ...


class NotebookSession(Workspace):
    """Toolboxes, stores, runtimes, runs and chains of one notebook kernel."""

    def __init__(self, user_ns: Mapping[str, Any] | None = None, *,
                 threaded: bool | None = None):
        super().__init__(inline_reads=True)
        self._user_ns = user_ns
        if threaded is None:
            threaded = in_a_kernel()
        #: where runs are driven: a loop of their own (in a kernel), else the caller's
        self.loop: RunLoop | None = RunLoop.shared() if threaded else None
        self.runs: dict[str, Run] = {}
        self.run_stores: dict[str, str] = {}  # run_id -> store key
        self.chains: dict[str, Chain] = {}
        # name -> (chain, PlanReport) bound by `%chain plan`: a run of exactly that chain
        # records how it was planned
        self.plans: dict[str, tuple[Chain, Any]] = {}
        self.widgets: dict[str, ShownRun] = {}  # run id -> the widget showing it here
        self.mcp_specs: set[tuple[int, str]] = set()  # (toolbox id, --mcp spec) added

    @property
    def user_ns(self) -> Mapping[str, Any]:
        return self._user_ns if self._user_ns is not None else {}

    # ------------------------------------------------------------------ toolboxes
    def toolbox(self, var: str | None = None) -> tuple[Toolbox, str | None]:
        """The toolbox to use and a note to show when the choice was not obvious.

        ``var`` names a Toolbox in the user namespace; else the default toolbox filled by
        ``@chainlab.tool`` (when it has tools); else the only Toolbox in the namespace.
        Raises SessionError naming the fix.
        """
        ns = self.user_ns
        others = {name: v for name, v in ns.items()
                  if isinstance(v, Toolbox) and v is not default_toolbox
                  and not name.startswith("_")}
        if var is not None:
            if var not in ns:
                raise SessionError(f"--tools {var}: no variable {var!r} in the notebook"
                                   f"{did_you_mean(var, others)}")
            value = ns[var]
            if not isinstance(value, Toolbox):
                raise SessionError(f"--tools {var}: {var!r} is a {type(value).__name__}, not a "
                                   "chainlab.Toolbox")
            return value, None
        if len(default_toolbox):
            note = None
            if others:
                names = ", ".join(sorted(others))
                note = (f"using the default toolbox (@chainlab.tool: "
                        f"{', '.join(default_toolbox.names())}); also in the notebook: {names} "
                        f"(pass --tools {sorted(others)[0]} to use it)")
            return default_toolbox, note
        distinct = {id(v): v for v in others.values()}
        if len(distinct) == 1:
            return next(iter(distinct.values())), None
        if not distinct:
            raise SessionError("no tools: register some with @chainlab.tool, or make a "
                               "chainlab.Toolbox and pass --tools VAR")
        raise SessionError(f"several toolboxes in the notebook ({', '.join(sorted(others))}) "
                           "and @chainlab.tool registered none; pass --tools NAME")

    def add_mcp(self, specs: list[str], var: str | None, name: str
                ) -> tuple[Toolbox, str | None]:
        """``%chain tools --mcp SPEC``: the servers' tools added to the toolbox ``var`` (else
        the active one; else a new toolbox bound to the variable ``name``). A spec already
        added to that toolbox (a cell run again) is left as it is. Raises SessionError."""
        from chainlab.workspace import add_mcp_servers

        try:
            toolbox, note = self.toolbox(var)
        except SessionError:
            if var is not None:
                raise
            toolbox, note = Toolbox(name), f"new toolbox {name!r} with the MCP tools"
            if isinstance(self._user_ns, dict):
                self._user_ns[name] = toolbox
        new = [spec for spec in specs if (id(toolbox), spec) not in self.mcp_specs]
        try:
            add_mcp_servers(toolbox, new)
        except UsageError as exc:
            raise SessionError(exc.message, hint=exc.hint) from None
        self.mcp_specs |= {(id(toolbox), spec) for spec in new}
        if len(new) < len(specs):
            note = (note + "; " if note else "") + "already added: " + ", ".join(
                spec for spec in specs if spec not in new)
        return toolbox, note

    # ------------------------------------------------------------------ stores, runtimes
    def store_key(self, db: Any) -> str:
        try:
            return super().store_key(db)
        except UsageError as exc:
            raise SessionError(exc.message, hint=exc.hint) from None

    def store(self, db: Any = None, *, must_exist: bool = False,
              readonly: bool = False) -> Store:
        try:
            return super().store(db, must_exist=must_exist, readonly=readonly)
        except UsageError as exc:
            raise SessionError(exc.message, hint=exc.hint) from None
        except StoreError as exc:  # in a notebook, a store that cannot be used is a usage error
            raise SessionError(f"cannot open the store {redacted(str(db or ''))!r}: {exc}"
                               ) from None

    def runtime(self, toolbox: Toolbox, db: Any = None) -> Runtime:
        """One runtime per toolbox and store; in a kernel a
        :class:`~chainlab.jupyter.runloop.LoopRuntime` (its runs are driven on
        :attr:`loop`)."""
        key = (id(toolbox), self.store_key(db))
        runtime = self.runtimes.get(key)
        if runtime is None:
            store = self.store(db)
            runtime = self.runtimes[key] = (
                LoopRuntime(toolbox, store, home=self.loop) if self.loop is not None
                else Runtime(toolbox, store))
        return runtime

    def on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` where this session's runs are driven (their loop's thread; waits
        for the result), or right here outside a kernel."""
        if self.loop is None:
            return fn(*args)
        return self.loop.call(fn, *args)

    def run_now(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """The result of ``coro`` (a runtime call that starts, resumes or forks a run) run
        on the session's run loop, which never suspends it: the session's stores are read
        inline (:func:`~chainlab.jupyter._loop.eager`)."""
        def on_its_loop() -> T:
            done = eager(coro)
            if not done.done:  # pragma: no cover - the session's stores never block
                raise RuntimeError(f"{what} suspended; chainlab.jupyter needs inline stores")
            return done.value  # type: ignore[return-value]

        return self.on_loop(on_its_loop)

    # ------------------------------------------------------------------ chains
    def chain(self, name: str) -> Chain:
        """A chain by variable name (a Chain in the namespace) or by the name it was defined
        with in ``%%chain``. Raises SessionError with a did-you-mean."""
        value = self.user_ns.get(name)
        if isinstance(value, Chain):
            return value
        if name in self.chains:
            return self.chains[name]
        for chain in self.chains.values():
            if chain.name == name:
                return chain
        known = [n for n, v in self.user_ns.items() if isinstance(v, Chain)] + list(self.chains)
        if value is not None:
            raise SessionError(f"{name!r} is a {type(value).__name__}, not a chain")
        raise SessionError(f"no chain {name!r}{did_you_mean(name, known)}; define it with "
                           f"%%chain {name}")

    # ------------------------------------------------------------------ runs
    def remember(self, run: Run, db: str | None) -> Run:
        self.runs[run.run_id] = run
        self.run_stores[run.run_id] = self.store_key(db)
        widget = self.widgets.get(run.run_id)
        if widget is not None and run.active and widget.run is not run:
            self.on_loop(widget.attach, run)
        return run

    def toolbox_for_run(self, ref: str, db: str | None, var: str | None) -> Toolbox:
        """The toolbox to continue the run ``ref`` with (``%chain resume / approve /
        reject / rollback``): :meth:`toolbox`; when the notebook has none and the run's agent
        came with ``--from MODULE:OBJ`` (it brings its tools; the runtime imports it again),
        an empty one. Raises SessionError as :meth:`toolbox` does otherwise."""
        try:
            return self.toolbox(var)[0]
        except SessionError as no_tools:
            if var is not None:
                raise
            try:
                _, record = self.find_record(self._run_id(ref), db)
            except UsageError:
                raise no_tools from None
            if FROM_META not in record.meta:
                raise
            return Toolbox("agent")

    def _run_id(self, ref: str) -> str:
        value = self.user_ns.get(ref)
        if isinstance(value, Run):
            return value.run_id
        return value if isinstance(value, str) and ref.isidentifier() else ref

    def find_run(self, ref: str, db: str | None = None,
                 toolbox: Toolbox | None = None) -> Run:
        """A run by id, or by the name of a variable holding a Run or a run id. Looks at the
        runs of this session, then in the store ``db`` (or every store opened here and the
        default one).
        The handle is live when this process drives the run, read-only otherwise.
        Raises SessionError with a did-you-mean."""
        value = self.user_ns.get(ref)
        if isinstance(value, str) and ref.isidentifier():
            ref, value = value, None  # a variable holding a run id
        if isinstance(value, Run):
            ref = value.run_id
            known = self.runs.get(ref)
            return known if known is not None and (known.active or not value.active) else value
        if ref in self.runs and (db is None or self.run_stores[ref] == self.store_key(db)):
            return self.runs[ref]
        try:
            key, _ = self.find_record(ref, db)
        except UsageError as exc:
            raise SessionError(exc.message) from None
        rt = self.runtime(toolbox if toolbox is not None else _NO_TOOLS, key)
        return self.remember(rt.get_run(ref), key)

    async def live(self, run: Run, toolbox: Toolbox | None = None) -> Run:
        """``run`` driven by this process: itself, or resumed from its store (new epoch)."""
        if run.active:
            return run
        current = self.runs.get(run.run_id)
        if current is not None and current.active:
            return current
        runtime = run.runtime
        if toolbox is not None and runtime.toolbox is not toolbox:
            runtime = self.runtime(toolbox, self.run_stores.get(run.run_id))
        live = await runtime.resume(run.run_id)
        return self.remember(live, self.run_stores.get(run.run_id))


_NO_TOOLS = Toolbox("no tools (read-only view)")

_SESSIONS: dict[int, NotebookSession] = {}


def get_session(shell: Any = None) -> NotebookSession:
    """The session of ``shell`` (default: the running IPython shell, else a bare one)."""
    if shell is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:  # pragma: no cover - IPython is in chainlab[jupyter]
            shell = None
    key = id(shell)
    session = _SESSIONS.get(key)
    if session is None:
        session = _SESSIONS[key] = NotebookSession(
            shell.user_ns if shell is not None else None)
    return session
