"""The runtime: one scheduler kernel, attempts and retries, confirmation, compensation,
recovery and the event stream (stdlib + pydantic + anyio only)."""

from chainlab.events import Event, EventKind
from chainlab.events.fold import AttemptRecord, RunState, StepState
from chainlab.events.status import AttemptStatus, RunStatus, SkipReason, StepStatus
from chainlab.runtime.coordination.fleet import new_worker
from chainlab.runtime.coordination.workers import LeaseExecutor, Worker
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.runtime import Run, RunResult, Runtime

__all__ = [
    "AttemptRecord",
    "AttemptStatus",
    "Clock",
    "Event",
    "EventKind",
    "Executor",
    "LeaseExecutor",
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
    "Worker",
    "new_worker",
]
