"""What a replay needs of a recorded run, read from its event log (:class:`Recording`):
the chain, context and options, every tool call that ran to an end (:class:`RecordedCall`,
in the order they started), every model turn of its agent steps (``turns``: the request,
its hash and the answer or the error: the cassette :mod:`chainlab.testing.replay_agent`
answers from), every person's decision in order, a fork's seed events, and the expected end
(step statuses and outputs, the confirmation points, the run's status and usage). It is
plain JSON data: :mod:`chainlab.testing.export` writes it as a test's fixture, and
:mod:`chainlab.testing.replay` replays it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chainlab._json import NotJSONError, to_json_value
from chainlab.agent.turns import TurnRecorded, turn_requests
from chainlab.errors import ReplayError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, RunStatus
from chainlab.runtime.preparing import adhoc_meta

if TYPE_CHECKING:
    from chainlab.store.base import Store

__all__ = ["FORMAT", "RecordedCall", "Recording", "expected_of", "recorded_turns"]

K = EventKind
FORMAT = 1  # the fixture's format version
_END = {K.STEP_SUCCEEDED: "succeeded", K.STEP_FAILED: "failed",
        K.STEP_RETRY_SCHEDULED: "retry", K.STEP_IN_DOUBT: "in_doubt",
        K.STEP_CANCELLED: "cancelled", K.COMPENSATION_SUCCEEDED: "succeeded",
        K.COMPENSATION_FAILED: "failed"}
_SEED = (K.RUN_STARTED, K.RUN_FORKED, K.STEP_REUSED)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One recorded call of a tool: ``kind`` ``call`` or ``compensation``; ``fate`` how the
    attempt ended (succeeded, failed, retry, in_doubt, cancelled)."""

    step_id: str
    kind: str
    attempt: int
    tool: str
    args: dict[str, Any]
    fate: str
    output: Any = None
    error_kind: str | None = None
    error: str | None = None
    usage: dict[str, Any] | None = None
    code: str | None = None
    # a remote job's call: {"handle": what submit returned (None: it failed), "state": how
    # the job ended (succeeded, failed, cancelled, not_found, timed_out, poll_failed, ...)}
    job: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"step_id": self.step_id, "kind": self.kind, "attempt": self.attempt,
               "tool": self.tool, "args": self.args, "fate": self.fate,
               "output": self.output, "error_kind": self.error_kind, "error": self.error,
               "usage": self.usage, "code": self.code}
        return out if self.job is None else {**out, "job": self.job}


@dataclass(frozen=True)
class Recording:
    """What a replay needs of a run, as JSON data (the fixture :mod:`.export` writes):
    the chain, context and options, every tool call in order, every person's decision in
    order, the fork seed of a fork, and the expected end: step statuses, outputs, the steps
    that waited for confirmation, the run's status."""

    run_id: str
    chain: dict[str, Any]
    context: dict[str, Any]
    options: dict[str, Any]
    calls: list[RecordedCall]
    decisions: list[dict[str, Any]]
    expected: dict[str, Any]
    chains: dict[str, dict[str, Any]] = field(default_factory=dict)
    seed: list[dict[str, Any]] = field(default_factory=list)  # a fork's first events
    started_at: float = 1_800_000_000.0
    turns: list[dict[str, Any]] = field(default_factory=list)  # agent steps' model turns
    #: what of the run's meta a replay needs: its ad-hoc agent (``chainlab.agent.adhoc``)
    meta: dict[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- reading a run
    @classmethod
    def from_store(cls, store: Store, run_id: str) -> Recording:
        """The recording of a stored run. Raises RunNotFoundError (an unknown run),
        ReplayError (a recorded value that is not JSON, a run still going)."""
        record = store.get_run(run_id)
        events = store.load_events(run_id)
        state = RunState.from_events(run_id, events, [s["id"] for s in
                                                      record.chain.get("steps", [])])
        if state.status not in RUN_TERMINAL and state.status != RunStatus.SUSPENDED:
            raise ReplayError(
                f"run {run_id!r} is {state.status or 'not started'}: only a finished or "
                "suspended run can be replayed; wait for it (run.wait()) and export again",
                run_id=run_id)
        # the replay starts from the recorded first events: a fork's seed (its reused
        # outputs), and for every run its run_started (the release order and the budget
        # estimates it ran with: a replay has no history to compute them from)
        seed: list[dict[str, Any]] = []
        for ev in events:
            if ev.kind not in _SEED:
                break
            seed.append(ev.to_dict())
        recording = cls(
            run_id=run_id, chain=record.chain, context=record.context,
            options=record.options, calls=list(_calls(events)),
            decisions=list(_decisions(events)), expected=expected_of(state, events),
            chains=record.chains, seed=seed,
            started_at=events[0].ts if events else record.created_at,
            turns=recorded_turns(events, state), meta=adhoc_meta(record.meta))
        recording.check_json()
        return recording

    def check_json(self) -> None:
        """Raises ReplayError naming the step whose recorded value is not JSON data."""
        for call in self.calls:
            _json_or_raise(call.output, self.run_id, call.step_id, "output")
            _json_or_raise(call.args, self.run_id, call.step_id, "args")
        for step_id, st in self.expected.get("steps", {}).items():
            _json_or_raise(st.get("output"), self.run_id, step_id, "output")
        _json_or_raise(self.context, self.run_id, None, "context")

    # ---------------------------------------------------------------- as a fixture
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "run_id": self.run_id, "chain": self.chain,
                "chains": self.chains, "context": self.context, "options": self.options,
                "started_at": self.started_at, "seed": self.seed,
                "calls": [c.to_dict() for c in self.calls], "decisions": self.decisions,
                "expected": self.expected, "turns": self.turns,
                **({"meta": self.meta} if self.meta else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "the fixture") -> Recording:
        """Raises ReplayError for data that is not a recording of this format."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ReplayError(f"{source} is not a chainlab replay fixture (format {FORMAT}); "
                              "write it again with `chainlab export-test`")
        try:
            return cls(run_id=data["run_id"], chain=data["chain"], context=data["context"],
                       options=data["options"], chains=data.get("chains", {}),
                       calls=[RecordedCall(**c) for c in data["calls"]],
                       decisions=list(data["decisions"]), expected=data["expected"],
                       seed=list(data.get("seed", [])),
                       started_at=float(data.get("started_at", 1_800_000_000.0)),
                       turns=list(data.get("turns", [])), meta=dict(data.get("meta", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"{source} is not a complete replay fixture ({exc!r} is "
                              "wrong or missing); write it again with `chainlab export-test`"
                              ) from None

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n",
                        encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        """Raises ReplayError for a file that is missing or not a fixture."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ReplayError(f"no replay fixture at {str(path)!r}; export the run again "
                              "(`chainlab export-test RUN -o tests/test_NAME.py` writes it)"
                              ) from None
        except (OSError, ValueError) as exc:
            raise ReplayError(f"cannot read the replay fixture {str(path)!r}: {exc}") from None
        return cls.from_dict(data, source=repr(str(path)))

    def tools_used(self) -> list[str]:
        return sorted({c.tool for c in self.calls})


def expected_of(state: RunState, events: Iterable[Event]) -> dict[str, Any]:
    """What a replay must give again: status and output of every step, the run's status,
    the steps that waited for confirmation (in order) and the usage totals."""
    confirmations = [ev.step_id for ev in events
                     if ev.kind == K.STEP_WAITING_CONFIRMATION and ev.step_id]
    return {
        "status": str(state.status),
        "steps": {step_id: {"status": str(st.status), "output": st.output}
                  for step_id, st in state.steps.items()},
        "confirmations": confirmations,
        "usage": dict(state.usage),
    }


def _json_or_raise(value: Any, run_id: str, step_id: str | None, what: str) -> None:
    try:
        data = to_json_value(value)
        json.dumps(data, allow_nan=False)
    except (NotJSONError, ValueError, TypeError) as exc:
        where = f"step {step_id!r}" if step_id else f"run {run_id!r}"
        raise ReplayError(
            f"{where}: its recorded {what} is not JSON data ({exc}), so it cannot go into a "
            "test fixture; make the tool return plain data or a pydantic model, run it "
            "again and export that run", run_id=run_id, step_id=step_id) from None


def _calls(events: Sequence[Event]) -> Iterable[RecordedCall]:
    """Every tool call that ran to an end, in the order they started. An attempt a crash
    interrupted and recovery ran again is not one (the re-run is); one that recovery
    reconciled (it took effect) or left in doubt is, with that outcome."""
    open_: dict[tuple[str, str], dict[str, Any]] = {}
    for ev in events:
        step_id = ev.step_id or ""
        p = ev.payload
        if ev.kind == K.STEP_STARTED and not p.get("subchain") and "turn" not in p:
            open_[(step_id, "call")] = {"step_id": step_id, "kind": "call",
                                        "attempt": ev.attempt or 1, "tool": p.get("tool"),
                                        "args": p.get("args") or {}, "code": p.get("code")}
        elif ev.kind == K.JOB_SUBMITTED and (step_id, "call") in open_:
            open_[(step_id, "call")]["job"] = {"handle": p.get("handle"), "state": None}
        elif ev.kind == K.JOB_PROGRESS and p.get("ended") and (step_id, "call") in open_:
            open_[(step_id, "call")].setdefault("job", {"handle": None})["state"] = p["state"]
        elif ev.kind == K.STEP_IN_DOUBT and (job := open_.get((step_id, "call"), {}).get("job")):
            job["state"] = job["state"] or p.get("reason")  # poll_failed, bad_handle
        elif ev.kind == K.COMPENSATION_STARTED:
            open_[(step_id, "compensation")] = {
                "step_id": step_id, "kind": "compensation", "attempt": ev.attempt or 1,
                "tool": p.get("tool"), "args": p.get("args") or {}, "code": None}
        elif ev.kind in _END:
            kind = "compensation" if ev.kind in (K.COMPENSATION_SUCCEEDED,
                                                 K.COMPENSATION_FAILED) else "call"
            call = open_.pop((step_id, kind), None)
            if call is None or p.get("resolved"):
                continue  # a person's resolution: no call (a decision, replayed as one)
            # (a call a crash interrupted that recovery found took effect, or that went in
            # doubt, is replayed as a call that answered so: the replay has no crash)
            if p.get("error_kind") == "invalid_input":
                continue  # the tool was not called: the replay's validation says it again
            fate = _END[ev.kind]
            if kind == "compensation" and ev.kind == K.COMPENSATION_FAILED \
                    and p.get("will_retry"):
                fate = "retry"
            yield RecordedCall(**call, fate=fate, output=p.get("output"),
                               error_kind=p.get("error_kind"), error=p.get("error"),
                               usage=p.get("usage"))
        elif ev.kind == K.STEP_READY and p.get("recovery"):
            open_.pop((step_id, "call"), None)


def recorded_turns(events: Sequence[Event], state: RunState) -> list[dict[str, Any]]:
    """Every model turn of the run's agent steps that was answered or failed, in the order
    they were asked: ``step_id``, ``turn``, ``request_hash``, ``request`` (rebuilt from the
    log: :func:`chainlab.agent.turns.turn_requests`; ``state``: the log folded), and ``answer``
    with its ``usage`` (and ``usage_unknown``, when the server's could not be taken) or
    ``error_kind`` and ``error``. A request a crash interrupted (asked
    again after the restart) is not one."""
    asked = {ev.seq: body for ev, body in turn_requests(state, events)}
    open_: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for ev in events:
        p, step_id = ev.payload, ev.step_id or ""
        if ev.kind == K.STEP_STARTED and "turn" in p:
            open_[step_id] = {"step_id": step_id, "turn": p["turn"],
                              "request_hash": p.get("request_hash"), "request": asked[ev.seq]}
        elif step_id in open_ and ev.kind == K.STEPS_ADDED:  # a turn that asked for calls
            turn = TurnRecorded.from_dict(p)
            out.append({**open_.pop(step_id), "answer": turn.answer.to_dict(),
                        **_usage_of(turn.usage, turn.usage_unknown)})
        elif step_id in open_ and ev.kind == K.STEP_SUCCEEDED and "answer" in p:  # the last
            out.append({**open_.pop(step_id), "answer": p["answer"],
                        **_usage_of(p.get("usage"), p.get("usage_unknown"))})
        elif step_id in open_ and ev.kind in (K.STEP_RETRY_SCHEDULED, K.STEP_FAILED) \
                and not p.get("resolved"):
            out.append({**open_.pop(step_id), "error_kind": p.get("error_kind"),
                        "error": p.get("error")})
        elif ev.kind in (K.STEP_READY, K.STEP_CANCELLED):
            open_.pop(step_id, None)  # interrupted by a crash, or cancelled: no answer
    return out


def _usage_of(usage: Any, unknown: str | None) -> dict[str, Any]:
    """A recorded turn's usage, and why the server's was unknown when it was."""
    return {"usage": usage, **({"usage_unknown": unknown} if unknown is not None else {})}


def _decisions(events: Sequence[Event]) -> Iterable[dict[str, Any]]:
    """Every person's decision, in order, as the arguments of the Run method that makes it."""
    asked: dict[str | None, Any] = {}  # the args hash each step last waited with
    for ev in events:
        p, step_id = ev.payload, ev.step_id
        if ev.kind == K.STEP_WAITING_CONFIRMATION:
            asked[step_id] = p.get("args_hash")
        elif ev.kind == K.STEP_APPROVED:
            decision: dict[str, Any] = {"action": "approve", "step_id": step_id,
                                        "args": p.get("args"), "note": p.get("note"),
                                        "asked_hash": asked.get(step_id)}
            if p.get("budget") is not None or p.get("over_budget"):
                decision["budget"] = p.get("budget")
            yield decision
        elif ev.kind == K.STEP_REJECTED:
            yield {"action": "reject", "step_id": step_id, "reason": p.get("reason")}
        elif ev.kind == K.RUN_ROLLBACK_STARTED and p.get("reason") == "rollback requested":
            yield {"action": "rollback", "step_id": None}  # run.rollback(): a person asked
        elif p.get("resolved") == "output":
            yield {"action": "resolve", "step_id": step_id, "output": p.get("output")}
        elif p.get("resolved") in ("retry", "fail"):
            yield {"action": "resolve", "step_id": step_id, p["resolved"]: True,
                   "note": p.get("note")}
