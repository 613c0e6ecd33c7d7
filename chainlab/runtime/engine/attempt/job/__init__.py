"""The ``job`` kind: a remote job (``@toolbox.job``; DESIGN §14), submitted once and waited
on holding no slot. Its phases are :mod:`.submit` (reserve, submit, record the handle;
after a crash only what is safe) and :mod:`.wait` (poll, callbacks, cancel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chainlab.events import EventKind, StepStatus
from chainlab.runtime.engine.attempt.call import gate
from chainlab.runtime.engine.attempt.job.submit import recover_job, run_job
from chainlab.runtime.engine.attempt.kind import Kind
from chainlab.runtime.engine.flow import make_ready
from chainlab.tools import args_hash, idempotency_key

if TYPE_CHECKING:
    from chainlab.events import StepState
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

K = EventKind
S = StepStatus

__all__ = ["RemoteJob", "waiting_job"]


class RemoteJob(Kind):
    """A remote job: submit once, record the handle, wait without a slot (``job``)."""

    name = "job"

    async def run(self, k: RunCore, node: Node) -> None:
        opened = gate(k, node)
        if opened is None:
            return
        attempt, args, _ = opened
        key = idempotency_key(k.run_id, node.id, args_hash(args))
        await run_job(k, node, attempt, args, key)

    def recover(self, k: RunCore, node: Node) -> bool:
        """A reservation or a recorded handle is recovered by :meth:`reconcile` (waited on
        again, found, or in doubt: never a blind resubmit); an attempt that reserved
        nothing never called submit, so it simply runs again."""
        st = k.steps[node.id]
        k.args[node.id] = dict(st.args or {})
        job = st.job
        if job is not None and job["attempt"] == st.attempts:
            return True
        k.emit(K.STEP_READY, node.id, st.attempts, {"recovery": "rerun"})
        make_ready(k, node)
        return False

    async def reconcile(self, k: RunCore, node: Node) -> None:
        await recover_job(k, node)

    def waiting_handle(self, ps: StepState | None) -> dict[str, Any] | None:
        return waiting_job(ps)


def waiting_job(ps: StepState | None) -> dict[str, Any] | None:
    """A job step of a parent run that still waits on a recorded handle: what a fork
    attaches to (``handle``, ``key``, ``submitted_at``), else None."""
    job = ps.job if ps is not None else None
    if (job is None or ps is None or ps.status != S.RUNNING or job.get("handle") is None
            or job.get("phase") == "ended"):
        return None
    return {"handle": job["handle"], "key": job.get("key"),
            "submitted_at": job.get("submitted_at")}
