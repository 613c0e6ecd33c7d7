"""The runtime: one scheduler kernel, attempts and retries, confirmation, compensation,
recovery and the event stream (stdlib + pydantic + anyio only).

This package's names are what views and front ends use of the runtime (they never import
``chainlab.runtime.engine``): the runtime and a run's handle, their types, and the checks a
front end runs on a stored run before it takes the run over (:func:`check_approve_args`,
:func:`check_rollback`: the very checks the runtime applies, so their messages cannot
drift)."""

from chainlab.events import Event, EventKind
from chainlab.events.fold import AttemptRecord, RunState, StepState
from chainlab.events.status import AttemptStatus, RunStatus, SkipReason, StepStatus
from chainlab.runtime.coordination.workers import LeaseExecutor, Worker
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.decisions import check_approve_args, check_rollback
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.fleet import new_worker
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
    "check_approve_args",
    "check_rollback",
    "new_worker",
]
