"""THE JSON view of a run: what ``chainlab show --json`` (and every command's ``--json``)
prints and what an HTTP API hands out. Pure functions over a stored
:class:`~chainlab.store.base.RunRecord` and the fold of its events
(:class:`~chainlab.events.fold.RunState`): no I/O, no rich, no pandas, and the result is
always plain JSON data (a value that is not, say a preview a tool made of an object, is
shown by its repr).

:func:`run_dict`, one run::

    {"run_id": "run-1", "chain": "saga", "status": "suspended", "epoch": 1,
     "created_at": 1800000000.0, "updated_at": 1800000003.5,
     "lineage": {"forked_from": "run-0", "at_seq": 12} | None,
     "queue": "default" | None,
     "worker": {"name": "w2", "host": "h1", "pid": 4242, "beat_at": 1800000003.1} | None,
     "last_seq": 9,
     "steps": {"pay": {"status": "waiting_confirmation", "attempts": [...], "output": None,
                       "reason": None, "error_kind": None, "error": None, "reused": None},
               ...},
     "outputs": {"charge": {"id": "ch-10"}},
     "waiting": [{"step_id": "pay", "tool": "pay", "kind": "confirm", "args": {...},
                  "preview": {...}, "error": None, "since": 1800000000.5}],
     "usage": {"input_tokens": 812, "output_tokens": 97, "tokens": 909, "cost": 0.0031},
     "output": {"invoice": "Ada: 38.25 EUR"} | None,
     "grants": [{"id": "g1", "when": "args.amount <= 100", "scope": "run", "by": "alice",
                 ...}]}

* ``steps``: every step the run knows, in declaration order (sub-chain steps as
  ``parent/child``; then the steps the run grew: a for_each step's instances ``id[N]``, an
  agent's calls ``agent/TURN.N``); ``attempts`` lists its tool calls and
  compensations in start order (:func:`attempt_dict`); ``reused``: what a fork copied the
  step from, else None. An agent step also has ``turns`` (DESIGN §18): per model turn its
  number, its calls (``{"step_id", "tool", "status"}``, or ``{"step_id": None,
  "function", "refused"}`` for a call refused to the model), its ``usage`` (with
  ``usage_unknown`` when what the server reported could not be taken: ``usage`` is then
  what was counted in its stead) and ``final`` (true for the turn that answered);
  ``run.transcript(step_id)`` has the text besides.
* ``waiting``: what waits for a person (nothing once the run ended): ``kind`` ``confirm``
  (approve or reject; ``preview`` is what the approver sees, the args when the tool has no
  preview) or ``in_doubt`` (resolve: it took effect, retry, or fail; ``preview`` and
  ``error`` say what went wrong); ``since``: when the step began to wait. The same items as
  :class:`chainlab.runtime.coordination.inbox.WaitingDecision`, read from the fold alone.
* a step someone or something decided has ``decided``: ``{"action": "approved", "by":
  "policy:small" | "grant:g1" | PRINCIPAL, "text": "policy small: small refunds"}``
  (DESIGN §21); ``grants``: the grants people gave in the run (DESIGN §21), revoked ones
  too (``revoked``: by, ts).
* ``outputs``: the outputs of the steps that succeeded, in the order they did.
* ``output``: the chain's declared ``output`` selected from a succeeded run (what
  ``RunResult.output`` is, :func:`chainlab.plan.inputs.select_output`); None while the run
  has not succeeded or when the chain declares no output.
* ``usage``: what the run consumed (tokens, cost, models: :mod:`chainlab.events.usage`),
  the sum of its attempts' and its planner's; each step and attempt has its own ``usage``
  (None when it reported nothing; a step a fork reused made no call, so None).

:func:`record_dict` is a run as listed (``chainlab runs --json``): the record's fields, the
number of top-level steps, the run's meta, its lineage, its queue and worker.

* ``queue``: the queue a worker fleet drains the run from (None: it was not enqueued);
  ``worker``: the fleet worker that drives it right now (:func:`worker_dict`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import safe_repr
from chainlab.events.fold_decisions import decided_by
from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus
from chainlab.plan.parts import names_an_agent

if TYPE_CHECKING:
    from chainlab.events.fold import AttemptRecord, RunState, StepState
    from chainlab.store.base import RunRecord

__all__ = ["attempt_dict", "declared_output", "job_caption", "job_dict", "job_short_id",
           "lineage_dict", "record_dict", "run_dict", "step_dict", "waiting_dicts", "worker_dict"]

#: the step statuses that wait for a person, and the kind of decision each one needs
_WAITS = {StepStatus.WAITING_CONFIRMATION: "confirm", StepStatus.IN_DOUBT: "in_doubt"}


def run_dict(record: RunRecord, state: RunState) -> dict[str, Any]:
    """One run as JSON data (shape: the module docstring). ``status`` is the fold's (the
    event log is the truth), the record's while no event was folded."""
    by_step: dict[str, list[AttemptRecord]] = {}
    for rec in state.attempts:
        by_step.setdefault(rec.step_id, []).append(rec)
    steps = {step_id: step_dict(st, by_step.get(step_id, ()),
                                decided_by(state, step_id) if st.decided else None)
             for step_id, st in state.steps.items()}
    if any(names_an_agent(rec.tool) for rec in state.attempts):  # an agent's turns
        from chainlab.agent.turns import turns_by_step

        for step_id, turns in turns_by_step(state).items():
            steps[step_id]["turns"] = _plain(turns)
    return {
        "run_id": record.run_id,
        "chain": record.chain_name,
        "status": str(state.status or record.status),
        "epoch": record.epoch,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "lineage": lineage_dict(record),
        "queue": record.queue,
        "worker": worker_dict(record),
        "last_seq": state.last_seq,
        "steps": steps,
        "outputs": _plain(state.outputs),
        "waiting": waiting_dicts(record, state),
        "usage": _plain(state.usage),
        "output": _plain(declared_output(record, state)),
        "grants": _plain(list(state.grants.values())),
    }


def declared_output(record: RunRecord, state: RunState) -> Any:
    """The chain's declared ``output`` of a succeeded run (the run's ``RunResult.output``);
    None before it succeeded or when the chain declares none."""
    if record.chain.get("output") is None or state.status != RunStatus.SUCCEEDED:
        return None
    from chainlab.plan.inputs import select_output
    from chainlab.plan.schema import Chain

    return select_output(Chain.from_dict(record.chain), state.outputs, record.context)


def record_dict(record: RunRecord) -> dict[str, Any]:
    """A run as listed: id, chain, status, epoch, times, top-level step count, meta, lineage."""
    return {"run_id": record.run_id, "chain": record.chain_name, "status": str(record.status),
            "epoch": record.epoch, "created_at": record.created_at,
            "updated_at": record.updated_at, "steps": len(record.chain.get("steps", [])),
            "meta": _plain(record.meta), "lineage": lineage_dict(record),
            "queue": record.queue, "worker": worker_dict(record)}


def worker_dict(record: RunRecord) -> dict[str, Any] | None:
    """``{"name", "host", "pid", "beat_at"}`` of the fleet worker that drives the run now
    (DESIGN §19), None when no worker does (not enqueued, or suspended: it holds none)."""
    driver = record.driver
    if driver is None or driver.worker is None:
        return None
    return {"name": driver.worker, "host": driver.host, "pid": driver.pid,
            "beat_at": driver.beat_at}


def lineage_dict(record: RunRecord) -> dict[str, Any] | None:
    """``{"forked_from": parent run id, "at_seq": the parent's event it forked at}`` for a
    fork, None for a run started from a chain."""
    parent = record.meta.get("forked_from")
    if parent is None:
        return None
    return {"forked_from": parent, "at_seq": record.meta.get("forked_at_seq")}


def step_dict(st: StepState, attempts: Iterable[AttemptRecord] = (),
              decided: str | None = None) -> dict[str, Any]:
    """One step: status, its ``attempts`` (tool calls and compensations, in start order),
    output, reason, error (kind and message), and what a fork reused it from; a remote job's
    step also has ``job`` (:func:`job_dict`); a decided one ``decided``: ``action``, ``by``
    (a principal, ``policy:ID``, ``grant:ID``) and ``text`` (``decided_by``'s wording)."""
    out = {
        "status": str(st.status),
        "attempts": [attempt_dict(a) for a in attempts],
        "output": _plain(st.output),
        "reason": _text(st.reason),
        "error_kind": _text(st.error_kind),
        "error": _text(st.error),
        "reused": _plain(st.reused),
        "usage": _plain(st.usage),
    }
    if st.job is not None:
        out["job"] = job_dict(st)
    if st.decided is not None:
        out["decided"] = {"action": st.decided["action"], "by": _text(st.decided.get("by")),
                          "text": decided}
    return out


def job_short_id(handle: Any) -> str:
    """Four characters that name a job in captions: the start of its ``id`` (or ``pid``)
    when the handle has one, else of a hash of the handle."""
    if isinstance(handle, dict):
        for field in ("id", "job_id", "pid", "name"):
            value = handle.get(field)
            if isinstance(value, str | int) and str(value):
                return str(value)[:4]
    import hashlib
    import json

    return hashlib.sha1(json.dumps(handle, sort_keys=True, default=str).encode()
                        ).hexdigest()[:4]


def job_caption(st: StepState) -> str | None:
    """What a step's remote job is doing, for a DAG node and a row: ``"waiting · job 7f3c ·
    40%"`` (``submitting`` before its handle is recorded; the state while the backend gave
    no progress); None for a step that is not a job, or whose job ended."""
    job = st.job
    if job is None or st.status != StepStatus.RUNNING or job.get("phase") == "ended":
        return None
    if job.get("handle") is None:
        return "submitting · job"
    progress = job.get("progress")
    tail = f"{round(progress * 100)}%" if isinstance(progress, int | float) else \
        str(job.get("state") or "pending")
    return f"waiting · job {job_short_id(job['handle'])} · {tail}"


def job_dict(st: StepState) -> dict[str, Any] | None:
    """A remote job's record: ``phase`` (submitting | waiting | ended), ``key``, ``handle``,
    ``how`` it was recorded (submitted | found | attached), ``state`` and ``progress`` the
    last poll said, ``note``, ``polls``, ``poll_errors`` and the last ``error``, when it was
    reserved and submitted, whether a completion arrived from outside, and ``caption``."""
    job = st.job
    if job is None:
        return None
    return {
        "phase": job.get("phase"), "key": job.get("key"), "handle": _plain(job.get("handle")),
        "how": job.get("how"), "state": job.get("state"), "progress": job.get("progress"),
        "note": _text(job.get("note")), "polls": job.get("polls"),
        "poll_errors": job.get("poll_errors"), "error": _text(job.get("error")),
        "reserved_at": job.get("reserved_at"), "submitted_at": job.get("submitted_at"),
        "completed_from_outside": job.get("completion") is not None,
        "caption": job_caption(st),
    }


def attempt_dict(rec: AttemptRecord) -> dict[str, Any]:
    """One call or compensation: number (per step and kind), kind, status, start and end
    (None while it runs), error kind and message, and the back-off scheduled after it."""
    return {
        "attempt": rec.attempt,
        "kind": rec.kind,
        "status": str(rec.status),
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "error_kind": _text(rec.error_kind),
        "error": _text(rec.error),
        "retry_delay_s": rec.retry_delay_s,
        "usage": _plain(rec.usage),
    }


def waiting_dicts(record: RunRecord, state: RunState) -> list[dict[str, Any]]:
    """What waits for a person, in step order (empty once the run ended)."""
    if state.status in RUN_TERMINAL:
        return []
    tools = {s["id"]: s.get("tool") for s in record.chain.get("steps", [])}
    calls: dict[str, AttemptRecord] = {}
    for rec in state.attempts:
        if rec.kind == "call":
            calls[rec.step_id] = rec  # the last call of each step
            if rec.tool:
                tools.setdefault(rec.step_id, rec.tool)
    out = []
    for step_id, st in state.steps.items():
        kind = _WAITS.get(st.status)
        if kind is None:
            continue
        if kind == "confirm":
            error = None
            preview = st.preview if st.preview is not None else st.args
            since = st.waiting_since
        else:
            error = f"{st.error_kind}: {st.error}" if st.error_kind else st.error
            preview = error
            last = calls.get(step_id)  # its call ended when the step went in doubt
            since = last.ended_at if last is not None else st.waiting_since
        out.append({"step_id": step_id, "tool": tools.get(step_id), "kind": kind,
                    "args": _plain(st.args), "preview": _plain(preview), "error": error,
                    "since": since})
    return out


def _text(value: Any) -> str | None:
    """A reason, error kind or message as a plain str (the fold may hold a StrEnum)."""
    return None if value is None else str(value)


def _plain(value: Any) -> Any:
    """``value`` as JSON data; a part that is not JSON (an object in a preview, a NaN) as
    its repr, the rest as it is."""
    try:
        return to_json_value(value)
    except NotJSONError:
        pass
    if isinstance(value, dict):
        return {k if isinstance(k, str) else safe_repr(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return safe_repr(value)
