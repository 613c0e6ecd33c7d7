"""The runtime: one scheduler kernel, attempts and retries, confirmation, compensation,
recovery and the event stream (stdlib + pydantic + anyio only)."""

from chainlab.runtime.clock import Clock, SystemClock
from chainlab.runtime.events import Event, EventKind
from chainlab.runtime.executors import Executor, LocalExecutor
from chainlab.runtime.run import Run, RunResult, Runtime
from chainlab.runtime.state import AttemptRecord, RunState, StepState
from chainlab.runtime.status import AttemptStatus, RunStatus, SkipReason, StepStatus

__all__ = [
    "AttemptRecord",
    "AttemptStatus",
    "Clock",
    "Event",
    "EventKind",
    "Executor",
    "LocalExecutor",
    "Run",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "SkipReason",
    "StepState",
    "StepStatus",
    "SystemClock",
]
