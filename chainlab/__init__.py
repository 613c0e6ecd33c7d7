"""chainlab: design, run and debug chains of tool calls as explicit DAGs.

The public API is curated here; everything else is reachable through its module.
Front-end packages (IPython, ipywidgets, graphviz, pandas, openai) are never imported by
``import chainlab``.
"""

from chainlab.errors import (
    ChainlabError,
    CycleError,
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
from chainlab.plan import Chain, ErrorKind, RetryPolicy, Rollback, RunOptions, Step
from chainlab.tools import CallContext, Reconciliation, Tool, Toolbox, default_toolbox, tool

__version__ = "0.1.0"

__all__ = [
    "CallContext",
    "Chain",
    "ChainlabError",
    "CycleError",
    "ErrorKind",
    "MissingExtraError",
    "PermanentError",
    "PlanError",
    "PlannerError",
    "Problem",
    "Reconciliation",
    "RetryPolicy",
    "Rollback",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunOptions",
    "RunStateError",
    "StaleEpochError",
    "Step",
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
]


def load_ipython_extension(ipython):  # type: ignore[no-untyped-def]
    """``%load_ext chainlab``: imports the Jupyter front end only now."""
    from chainlab.jupyter import load_ipython_extension as _load

    _load(ipython)
