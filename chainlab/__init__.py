"""chainlab: design, run and debug chains of tool calls as explicit DAGs.

The public API is curated here and loaded lazily (PEP 562), so ``import chainlab`` costs a
few milliseconds and the first use of ``chainlab.Chain`` pays for pydantic. Front-end
packages (IPython, ipywidgets, graphviz, pandas, openai) are never imported by
``import chainlab``.

One list, as anyio keeps it: the ``if TYPE_CHECKING`` block below names every lazily loaded
name and the package it comes from. Type checkers read it as it is; at import the block is
read back from this file's source into the map ``__getattr__`` loads from (and where the
source cannot be read, the block simply runs). The exception tree is imported at once: it is
cheap, and ``except chainlab.PlanError`` must not import the runtime. A test checks that
``__all__`` is exactly these names. A class exported here shows itself as ``chainlab.Name``
once loaded from here (its ``__module__``), which is where users find it.
"""

# (no `from __future__ import annotations` and private aliases only: every public name in
# this namespace is part of the API, and a test checks that __all__ lists exactly them)
import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from chainlab.errors import (
    ChainlabError,
    CycleError,
    DecisionError,
    DecisionTimeoutError,
    DriverAliveError,
    InputError,
    MissingExtraError,
    PermanentError,
    PlanError,
    PlannerError,
    Problem,
    RunNotActiveError,
    RunNotFoundError,
    RunStateError,
    StaleEpochError,
    StoreError,
    ToolDefinitionError,
    ToolError,
    TransientError,
    UnknownStepError,
)

__version__ = "0.1.0"

#: name -> the package it is loaded from: the ``if TYPE_CHECKING`` block, read from source
_LAZY: dict[str, str] = {}


def _as_public(value: _Any) -> _Any:
    """``chainlab.Name`` as the class's module, for a chainlab class exported here."""
    if isinstance(value, type) and value.__module__.startswith("chainlab."):
        value.__module__ = "chainlab"
    return value


def _read_lazy_block() -> bool:
    """Fill ``_LAZY`` from the ``if TYPE_CHECKING`` block of this module's source; False when
    the source cannot be read (a build without ``.py`` files): the block then runs."""
    import ast  # already loaded by the dataclasses the exception tree uses

    try:
        with open(__file__, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        start = lines.index("if _TYPE_CHECKING or not _read_lazy_block():") + 1
    except (OSError, ValueError):
        return False
    block = []
    for line in lines[start:]:  # only the block is parsed: a millisecond less at import
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    for stmt in ast.parse("\n".join(block)).body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module:
            _LAZY.update((alias.asname or alias.name, stmt.module) for alias in stmt.names)
    return bool(_LAZY)


if _TYPE_CHECKING or not _read_lazy_block():
    from chainlab.agent import Agent
    from chainlab.events import ErrorKind, Event, EventKind, RunStatus, StepStatus
    from chainlab.plan import Chain, RetryPolicy, Rollback, RunOptions, Step
    from chainlab.runtime import Run, RunResult, Runtime
    from chainlab.store import MemoryStore, SQLiteStore, open_store
    from chainlab.timeline import whatif
    from chainlab.tools import (
        CallContext,
        JobStatus,
        Reconciliation,
        Tool,
        Toolbox,
        default_toolbox,
        tool,
    )

__all__ = [
    "Agent",
    "CallContext",
    "Chain",
    "ChainlabError",
    "CycleError",
    "DecisionError",
    "DecisionTimeoutError",
    "DriverAliveError",
    "ErrorKind",
    "Event",
    "EventKind",
    "InputError",
    "JobStatus",
    "MemoryStore",
    "MissingExtraError",
    "PermanentError",
    "PlanError",
    "PlannerError",
    "Problem",
    "Reconciliation",
    "RetryPolicy",
    "Rollback",
    "Run",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunOptions",
    "RunResult",
    "RunStateError",
    "RunStatus",
    "Runtime",
    "SQLiteStore",
    "StaleEpochError",
    "Step",
    "StepStatus",
    "StoreError",
    "Tool",
    "ToolDefinitionError",
    "ToolError",
    "Toolbox",
    "TransientError",
    "UnknownStepError",
    "default_toolbox",
    "load_ipython_extension",
    "open_store",
    "tool",
    "unload_ipython_extension",
    "whatif",
]

for _name in __all__:  # the exception tree (and the block, where it ran)
    if _name in globals():
        _as_public(globals()[_name])
del _name


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chainlab' has no attribute {name!r}")
    value = _as_public(getattr(_importlib.import_module(module), name))
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: _Any) -> None:
    """``%load_ext chainlab``: imports the Jupyter front end only now."""
    from chainlab.jupyter import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: _Any) -> None:
    """``%unload_ext chainlab``."""
    from chainlab.jupyter import unload_ipython_extension as _unload

    _unload(ipython)
