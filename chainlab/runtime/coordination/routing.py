"""``Runtime.decide`` (and ``approve_all``, ``complete_job``): a person's decision (approve,
reject, resolve) on a run, wherever the run is driven (DESIGN §13). It works on the
runtime's parts: its :class:`~chainlab.runtime.host.Host` (the runs it drives, the store,
its liveness) and its :class:`~chainlab.runtime.takeovers.Takeovers` (to take a run over).

* This runtime drives the run: the decision is applied directly, through the Run.
* Another process drives it and is alive (fresh heartbeat, current epoch): the decision is
  posted to the run's mailbox in the store, and the driver applies it with the same checks
  (``chainlab.runtime.coordination.liveness``); its answer comes back through the store (PostgreSQL:
  NOTIFY; elsewhere: a poll). Refused: DecisionError with the driver's message; no answer
  within ``timeout``: DecisionTimeoutError naming the driver.
* Nobody drives it (suspended and left, crashed, or its driver went stale): this runtime
  takes it over (``resume`` with the check "is the step still waiting?" made on the state
  it claims) and applies the decision; the run then goes on here.
* The run belongs to a queue (DESIGN §19): the decision is checked against the stored state,
  then recorded in the run's mailbox and left to the fleet, wherever the run is: the worker
  that drives it applies it, or (a suspended run holds no worker) the next worker claims
  the run because of it. This process never drives it. The answer is waited for up to
  ``timeout``: ``"applied"``, a refusal (DecisionError), or ``"recorded"`` when no worker
  answered yet (the request does not expire: a worker applies it when one runs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import DecisionError, DecisionTimeoutError, RunStateError, StoreError
from chainlab.events import RUN_TERMINAL, RunState, read_run
from chainlab.plan.schema import Chain
from chainlab.runtime.coordination.liveness import apply_request
from chainlab.runtime.engine import decisions
from chainlab.store.base import DecisionRequest, DriverInfo, Notifier

if TYPE_CHECKING:
    from chainlab.runtime.host import Host
    from chainlab.runtime.takeovers import Takeovers

__all__ = ["approve_all", "complete_job", "decide", "payload_for", "requester"]

requester = decisions.requester


def payload_for(action: str, *, note: str | None = None, reason: str | None = None,
                args: dict[str, Any] | None = None, output: Any = None, retry: bool = False,
                fail: bool = False, budget: dict[str, Any] | None = None,
                grant: dict[str, Any] | None = None,
                roles: Sequence[str] | None = None) -> dict[str, Any]:
    """The request payload of ``action`` (only what that action takes). Raises ValueError for
    an unknown action or arguments of another action."""
    action = decisions.Action(action)
    given = {"note": note, "reason": reason, "args": args, "output": output,
             "retry": retry or None, "fail": fail or None, "budget": budget, "grant": grant,
             "roles": list(roles) if roles is not None else None}
    takes = {decisions.Action.APPROVE: ("args", "note", "budget", "grant", "roles"),
             decisions.Action.REJECT: ("reason",),
             decisions.Action.REVOKE: (),
             decisions.Action.RESOLVE: ("output", "retry", "fail", "note")}[action]
    extra = sorted(k for k, v in given.items() if v is not None and k not in takes)
    if extra:
        raise ValueError(f"{action} takes {', '.join(takes)}; got {', '.join(extra)} as well: "
                         "leave those out")
    return {k: given[k] for k in takes if given[k] is not None}


async def decide(host: Host, takeovers: Takeovers, run_id: str, step_id: str, action: str,
                 *, by: str | None, payload: dict[str, Any], timeout: float) -> str:
    """See :meth:`Runtime.decide`. Returns ``"applied"`` (``"recorded"``: left to the
    fleet, no worker answered yet)."""
    request = DecisionRequest(run_id=run_id, step_id=step_id, action=str(action),
                              payload=payload, by=by or requester())
    live_run = host.driven(run_id)
    if live_run is not None:
        await apply_request(live_run, request)
        return "applied"
    store = host.store
    record = await host.run_io(store.get_run, run_id)
    if record.queue is not None:
        return await _leave_to_fleet(host, record.chain, request, timeout)
    driver = await host.run_io(store.driver_of, run_id)
    live = host.liveness.live_driver(driver, record)
    if live is not None:
        return await _ask(host, live, request, timeout)
    if action == decisions.Action.APPROVE and payload.get("args") is not None:
        _check_args(host, record.chain, step_id, payload["args"])  # before taking over
    run = await takeovers.resume(run_id, check=partial(decisions.check, action=action,
                                                       step_id=step_id))
    await apply_request(run, request)
    return "applied"


async def approve_all(host: Host, takeovers: Takeovers, run_id: str, step_id: str, *,
                      by: str | None, note: str | None, timeout: float) -> list[str]:
    """See :meth:`Runtime.approve_all`: :func:`decide` once per waiting step at or under
    ``step_id``, each with its own args; a step decided meanwhile is left out."""
    done: list[str] = []
    for sid in decisions.waiting_under(await _state(host, run_id), step_id):
        try:
            await decide(host, takeovers, run_id, sid, decisions.Action.APPROVE, by=by,
                         payload=payload_for("approve", note=note), timeout=timeout)
        except RunStateError:  # it stopped waiting since it was read: not ours to approve
            continue
        done.append(sid)
    return done


async def complete_job(host: Host, takeovers: Takeovers, run_id: str, step_id: str, *,
                       output: Any, error: str | None, by: str | None, timeout: float) -> str:
    """See :meth:`Runtime.complete_job`: the completion, decided as :func:`decide` does."""
    payload = decisions.completion_payload(step_id, output=output, error=error, by=None)
    payload.pop("by")
    return await decide(host, takeovers, run_id, step_id, "complete_job", by=by,
                        payload=payload, timeout=timeout)


async def _state(host: Host, run_id: str) -> RunState:
    """The run's state: its kernel's when it is live here, else the stored one."""
    live = host.active(run_id)
    return live.state if live is not None else (await host.run_io(read_run, host.store,
                                                                  run_id))[2]


async def _leave_to_fleet(host: Host, chain_data: dict[str, Any],
                          request: DecisionRequest, timeout: float) -> str:
    """Record ``request`` for the fleet (checked first, on the stored state) and wait up to
    ``timeout`` for a worker's answer; ``"recorded"`` when none came yet."""
    _, _, state = await host.run_io(read_run, host.store, request.run_id)
    decisions.check(state, request.action, request.step_id)
    if request.action == decisions.Action.APPROVE and request.payload.get("args") is not None:
        _check_args(host, chain_data, request.step_id, request.payload["args"])
    try:
        return await _ask(host, None, request, timeout)
    except DecisionTimeoutError:
        return "recorded"


async def _ended_without_answer(host: Host, request: DecisionRequest, request_id: int,
                                asked: DriverInfo) -> DecisionError | None:
    """The refusal to give when the run ended and its driver answered what it had and left
    (a request that reached it too late: the loser of a race, one sent as the run ended)."""
    record = await host.run_io(host.store.get_run, request.run_id)
    if record.status not in RUN_TERMINAL:
        return None
    driver = await host.run_io(host.store.driver_of, request.run_id)
    if driver is not None and driver.driver_id == asked.driver_id:
        return None  # it is still there: it answers everything it read before it leaves
    again = await host.run_io(host.store.get_request, request_id)
    if again.outcome is not None:
        return None  # answered meanwhile: the loop reads it
    state = read_run(host.store, request.run_id)[2]
    try:
        decisions.check(state, request.action, request.step_id)
    except RunStateError as exc:
        return DecisionError(f"{exc} (the run ended before its driver read this request)",
                             step_id=request.step_id, field=request.action,
                             run_id=request.run_id)
    return DecisionError(f"run {request.run_id!r} ended ({record.status}) before its driver "
                         "answered; decide again if it still needs it",
                         step_id=request.step_id, field=request.action, run_id=request.run_id)


def _check_args(host: Host, chain_data: dict[str, Any], step_id: str,
                args: dict[str, Any]) -> None:
    chain = Chain.from_dict(chain_data)
    step = chain.step(step_id) if step_id in chain.step_ids else None
    toolbox = host.toolbox
    tool = toolbox.get(step.tool) if step is not None and step.tool in toolbox else None
    decisions.check_approve_args(tool, step_id, args)


async def _ask(host: Host, driver: DriverInfo | None, request: DecisionRequest,
               timeout: float) -> str:
    """Post ``request`` for the live ``driver`` and wait for its answer (``driver`` None: for
    whichever worker of the run's queue takes it; the request then never expires)."""
    store = host.store
    wait = store.wait_for_answer if isinstance(store, Notifier) else None
    if wait is not None:  # listen BEFORE posting: the answer's NOTIFY cannot be missed
        await host.run_io(wait, 0, 0.0)
    now = time.time()
    expires = None if driver is None else now + timeout
    request_id: int = await host.run_io(
        store.post_request, request.run_id,
        dataclasses.replace(request, created_at=now, expires_at=expires))
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = await host.run_io(store.get_request, request_id)
        except StoreError:
            got = None
        if got is not None and got.outcome == "applied":
            return "applied"
        if got is not None and got.outcome == "refused":
            raise DecisionError(got.message or f"the driver refused to {request.action}",
                                step_id=request.step_id, field=request.action,
                                run_id=request.run_id)
        ended = None if driver is None else await _ended_without_answer(
            host, request, request_id, driver)
        if ended is not None:
            raise ended
        left = deadline - time.monotonic()
        if left <= 0:
            raise DecisionTimeoutError(
                request.run_id, host=driver.host if driver else "(the fleet)",
                pid=driver.pid if driver else 0, request_id=request_id, timeout_s=timeout)
        if wait is not None:
            await anyio.to_thread.run_sync(wait, request_id, min(left, 1.0),
                                           abandon_on_cancel=True)
        else:
            await anyio.sleep(min(host.liveness.poll_s / 2, left))
