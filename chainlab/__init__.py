"""chainlab: design, run and debug chains of tool calls as explicit DAGs.

The public API is curated here and loaded lazily (PEP 562), so ``import chainlab`` costs a
few milliseconds and the first use of ``chainlab.Chain`` pays for pydantic. Front-end
packages (IPython, ipywidgets, graphviz, pandas, openai) are never imported by
``import chainlab``.
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

if _TYPE_CHECKING:
    from chainlab.plan import Chain, ErrorKind, RetryPolicy, Rollback, RunOptions, Step
    from chainlab.runtime import Run, RunResult, RunStatus, Runtime, StepStatus
    from chainlab.store import MemoryStore, SQLiteStore
    from chainlab.timeline import whatif
    from chainlab.tools import CallContext, Reconciliation, Tool, Toolbox, default_toolbox, tool

__version__ = "0.1.0"

_LAZY = {
    "Chain": "chainlab.plan", "ErrorKind": "chainlab.plan", "RetryPolicy": "chainlab.plan",
    "Rollback": "chainlab.plan", "RunOptions": "chainlab.plan", "Step": "chainlab.plan",
    "CallContext": "chainlab.tools", "Reconciliation": "chainlab.tools",
    "Tool": "chainlab.tools", "Toolbox": "chainlab.tools",
    "default_toolbox": "chainlab.tools", "tool": "chainlab.tools",
    "Run": "chainlab.runtime", "RunResult": "chainlab.runtime", "RunStatus": "chainlab.runtime",
    "Runtime": "chainlab.runtime", "StepStatus": "chainlab.runtime",
    "MemoryStore": "chainlab.store", "SQLiteStore": "chainlab.store",
    "whatif": "chainlab.timeline",
}

__all__ = [
    "CallContext",
    "Chain",
    "ChainlabError",
    "CycleError",
    "DecisionError",
    "DecisionTimeoutError",
    "DriverAliveError",
    "ErrorKind",
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
    "tool",
    "unload_ipython_extension",
    "whatif",
]


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chainlab' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
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
