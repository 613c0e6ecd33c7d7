"""The runtime: one scheduler kernel, attempts and retries, confirmation, compensation,
recovery and the event stream (stdlib + pydantic + anyio only).

The tree, bottom to top (each layer imports only those below it; tests/test_layering.py,
``RUNTIME_SUBLAYERS``):

* :mod:`.engine`: ONE run in ONE process (compile, the pure scheduler, the kernel and its
  drive, each kind of step (:mod:`.engine.attempt`, one module per kind), decisions,
  recovery, the saga, executors, the clock);
* :mod:`.history`: what recorded runs are used for (fork, estimates, what-if);
* :mod:`.run`: :class:`Run`, the handle of one run (reads, the control verbs, the event
  stream), and :class:`RunResult`; beside it :mod:`.preparing` (what a start checks and
  caches, and :func:`~.preparing.toolbox_of`, the one place a run's toolbox is found);
* :mod:`.coordination`: many processes over one store (liveness and the mailbox, decisions
  routed to a run's driver, watching, the team inbox, the queue, workers, ``new_worker``);
* the Runtime and its parts: :mod:`.host` (:class:`~.host.Host`: parts, lifetime, the runs
  it drives, the one tail every drive begins with), :mod:`.starts` (every way a new run
  begins), :mod:`.takeovers` (every way a stored run is taken up), and :mod:`.runtime`
  (:class:`Runtime`, the facade holding the three parts: every public method and its
  docstring there, each delegating in one line);
* :mod:`.faults`: fault injection for demos and tests (``faults.inject(run, ...)``).

This package's names are what views and front ends use of the runtime (they never import
``chainlab.runtime.engine``): the runtime and a run's handle, their types, and the checks a
front end runs on a stored run before it takes the run over (:func:`check_approve_args`,
:func:`check_rollback`: the very checks the runtime applies, so their messages cannot
drift).
"""

from chainlab.events import Event, EventKind
from chainlab.events.fold import AttemptRecord, RunState, StepState
from chainlab.events.status import AttemptStatus, RunStatus, SkipReason, StepStatus
from chainlab.runtime.coordination.fleet import new_worker
from chainlab.runtime.coordination.workers import LeaseExecutor, Worker
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.decisions import check_approve_args, check_approver, check_rollback
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.experiments import Experiment
from chainlab.runtime.runtime import Run, RunResult, Runtime

__all__ = [
    "AttemptRecord",
    "AttemptStatus",
    "Clock",
    "Event",
    "EventKind",
    "Executor",
    "Experiment",
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
    "check_approver",
    "check_rollback",
    "new_worker",
]
