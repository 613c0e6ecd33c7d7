"""What the HTTP endpoints do with runs, over ONE Runtime and its store (the handlers in
:mod:`chainlab.http.routes` only read the request and write the response).

Every read is the stored truth: the JSON view of a run is :func:`chainlab.render.json.run_dict`
over :func:`chainlab.events.read_run` (for a run this server drives, after ``store.flush``,
so what a client is shown is durable and a stream from its ``last_seq`` loses nothing).
Decisions go through :meth:`Runtime.decide` like the widget's and the CLI's (see
:mod:`chainlab.http.deciding`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import ValidationError

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import safe_repr
from chainlab.errors import ChainlabError, IdempotencyKeyError, RunNotFoundError
from chainlab.events import RUN_TERMINAL, read_run
from chainlab.http.bodies import Fork, StartRun, field_problem
from chainlab.http.chains import ServedChains
from chainlab.http.errors import ApiError
from chainlab.plan.schema import Chain, RunOptions
from chainlab.render.json import record_dict, run_dict
from chainlab.runtime import check_rollback
from chainlab.runtime.coordination.inbox import waiting_decisions, waiting_in
from chainlab.runtime.coordination.stalls import stalls
from chainlab.runtime.runtime import Runtime
from chainlab.tracing import TRACEPARENT_META

__all__ = ["Config", "Service"]


@dataclass(frozen=True)
class Config:
    """What a server allows. ``max_body_bytes``: the request body limit; ``keepalive_s``:
    the SSE keep-alive comment interval; ``inline_chains``: whether ``POST /runs`` takes a
    chain definition (else only served chains by name); ``decision_timeout_s``: how long a
    decision waits for another process's driver to answer; ``stream_send_timeout_s``: how
    long an SSE stream waits for a client that does not read before it closes the stream
    (the client reconnects with Last-Event-ID and loses nothing); ``cors_origins``: browser
    origins allowed to call the API (none by default); ``tools``: the ``MODULE:TOOLBOX``
    served (kept with each run, so ``chainlab resume`` finds the tools)."""

    max_body_bytes: int = 1 << 20
    keepalive_s: float = 15.0
    inline_chains: bool = True
    decision_timeout_s: float = 10.0
    max_wait_s: float = 300.0
    stream_send_timeout_s: float = 60.0
    cors_origins: tuple[str, ...] = ()
    tools: str | None = None
    poll_s: float = 0.05
    extra_meta: dict[str, Any] = field(default_factory=dict)


class Service:
    """Runs over one runtime: start (idempotent), read, list, wait, control, fork."""

    def __init__(self, runtime: Runtime, chains: ServedChains, config: Config):
        self.runtime = runtime
        self.store = runtime.store
        self.chains = chains
        self.config = config

    # ------------------------------------------------------------------ reading
    async def read(self, run_id: str) -> tuple[Any, list[Any], Any]:
        """``(record, events, state)`` as stored (durable), after a flush of what this
        server's driver of the run emitted. Raises RunNotFoundError with a did-you-mean."""
        run = self.runtime.driven(run_id)
        if run is not None:
            with contextlib.suppress(ChainlabError):  # fenced: the store says what is true
                await self.store.flush(run_id, run.epoch)
        try:
            return await self.runtime.run_io(read_run, self.store, run_id)  # type: ignore[no-any-return]
        except RunNotFoundError:
            known = [r.run_id for r in await self.runtime.run_io(self.store.list_runs, 200)]
            raise RunNotFoundError(run_id, known) from None

    async def record(self, run_id: str) -> Any:
        """The run's stored record (after a flush, as :meth:`read`), without its log.
        Raises RunNotFoundError with a did-you-mean."""
        run = self.runtime.driven(run_id)
        if run is not None:
            with contextlib.suppress(ChainlabError):
                await self.store.flush(run_id, run.epoch)
        try:
            return await self.runtime.run_io(self.store.get_run, run_id)
        except RunNotFoundError:
            known = [r.run_id for r in await self.runtime.run_io(self.store.list_runs, 200)]
            raise RunNotFoundError(run_id, known) from None

    async def view(self, run_id: str) -> dict[str, Any]:
        """``GET /runs/{run_id}``: the JSON view of the run."""
        record, _, state = await self.read(run_id)
        return run_dict(record, state)

    async def events(self, run_id: str, after: int, limit: int) -> dict[str, Any]:
        """``GET /runs/{run_id}/events``: ``{events, last_seq, next_after}`` (next_after:
        the ``after`` of the next page, None on the last one)."""
        _, events, state = await self.read(run_id)
        page = [ev for ev in events if ev.seq > after]
        more = len(page) > limit
        page = page[:limit]
        return {"run_id": run_id, "events": [ev.to_dict() for ev in page],
                "last_seq": state.last_seq,
                "next_after": page[-1].seq if more and page else None}

    async def state_at(self, run_id: str, seq: int) -> dict[str, Any]:
        """``GET /runs/{run_id}/state?at=SEQ``: the run as it was right after event
        ``seq`` (time travel: ``run.state_at``, the fold of the stored prefix; a seq past the
        last event is the run now, and ``at`` says which seq it is)."""
        _, _, now = await self.read(run_id)
        seq = min(seq, now.last_seq)  # (past the last event: the run as it is now)

        def fold() -> dict[str, Any]:
            run = self.runtime.get_run(run_id)
            return {**run_dict(run.record, run.state_at(seq)), "at": seq}

        return await anyio.to_thread.run_sync(fold)  # type: ignore[no-any-return]

    async def confirmations(self, run_id: str) -> list[dict[str, Any]]:
        """``GET /runs/{run_id}/confirmations``: what waits for a person in this run (tool,
        resolved args, preview, since when), each with the URLs that decide it."""
        record, events, state = await self.read(run_id)
        return [_with_actions(d.to_dict()) for d in waiting_in(record, events, state)]

    async def approvals(self) -> list[dict[str, Any]]:
        """``GET /approvals``: every waiting decision across unfinished runs, oldest first."""
        items = await self.runtime.run_io(waiting_decisions, self.store)
        return [_with_actions(d.to_dict()) for d in items]

    async def stalled(self) -> list[dict[str, Any]]:
        """``GET /approvals``'s ``stalled``: the runs that stand still with no step to
        decide (nobody drives one; a queued one behind the run holding its concurrency key),
        each with the move that ends it (:mod:`chainlab.runtime.coordination.stalls`)."""
        found = await self.runtime.run_io(stalls, self.store, self.runtime.liveness)
        return [s.to_dict() for s in found]

    async def list_runs(self, *, status: set[str] | None, chain: str | None,
                        waiting: bool | None, limit: int, cursor: str | None
                        ) -> dict[str, Any]:
        """``GET /runs``: newest first, filtered, one page: ``{runs, next_cursor}``."""
        after = _decode_cursor(cursor) if cursor else None
        records = await self.runtime.run_io(self.store.list_runs, None)
        records.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        if status:
            records = [r for r in records if str(r.status) in status]
        if chain:
            records = [r for r in records if r.chain_name == chain]
        if waiting is not None:
            open_ids = [r.run_id for r in records if r.status not in RUN_TERMINAL]
            items = await self.runtime.run_io(waiting_decisions, self.store, open_ids)
            with_waiting = {d.run_id for d in items}
            records = [r for r in records if (r.run_id in with_waiting) == waiting]
        if after is not None:
            records = [r for r in records if (r.created_at, r.run_id) < after]
        page = records[:limit]
        more = len(records) > limit
        return {"runs": [record_dict(r) for r in page],
                "next_cursor": _encode_cursor(page[-1].created_at, page[-1].run_id)
                if more and page else None}

    async def wait(self, run_id: str, timeout: float) -> dict[str, Any]:
        """``GET /runs/{run_id}/wait``: the run's view once it ended or waits for a person,
        or after ``timeout`` seconds (then its status says it still goes on)."""
        with anyio.move_on_after(timeout):
            run = self.runtime.driven(run_id)
            if run is not None:
                with contextlib.suppress(ChainlabError):  # fenced: follow the store instead
                    await run.wait()
                    return await self.view(run_id)
            try:
                watched = await self.runtime.run_io(self.runtime.watch_run, run_id)
            except RunNotFoundError:
                await self.read(run_id)  # the 404 with its did-you-mean
                raise
            try:
                await watched.wait()
            finally:
                watched.stop()
        return await self.view(run_id)

    # ------------------------------------------------------------------ starting
    def chain_of(self, body: StartRun) -> Chain:
        """The chain a request names, or its inline definition (validated by the start)."""
        if isinstance(body.chain, str):
            return self.chains.get(body.chain)
        if not self.config.inline_chains:
            raise ApiError(400, "bad_request", "this server runs only the chains it serves; "
                           "inline chain definitions are turned off",
                           fix="name a chain from GET /chains: {\"chain\": \"NAME\"}")
        return Chain.from_dict(body.chain)  # PlanError: 422 with every problem

    async def start(self, body: StartRun, *, key: str | None, by: str,
                    traceparent: str | None = None) -> tuple[dict[str, Any], bool]:
        """``POST /runs``: start a run in this server (it drives it), or with ``queue``
        enqueue it for the worker fleet. An ``Idempotency-Key`` (or a client-chosen
        ``run_id``, which then stands for the key) names the request: a retry returns the
        run the first one made (``created`` False), never a second one, also when retries
        race (the key is stored with the run, in one transaction); the same key with another
        request is refused (422 ``idempotency_key_reused``), a taken ``run_id`` without a
        key too (409). ``traceparent``: the caller's span, the parent of the run's trace (one
        that does not parse is dropped where every new run's meta is checked). Returns
        ``(view, created)``."""
        chain = self.chain_of(body)
        options = _options(body.options)
        if key is not None:
            _check_key(key)
        run_id = body.run_id or (_key_run_id(key) if key is not None else None)
        request_key = key if key is not None else (
            f"run_id={body.run_id}" if body.run_id is not None else None)
        meta = {**self.config.extra_meta, "source": "http", "started_by": by}
        if self.config.tools:
            meta["tools"] = self.config.tools
        if traceparent is not None:
            meta[TRACEPARENT_META] = traceparent
        try:
            if body.queue is not None:
                before = await self._named(request_key)
                queued = await self.runtime.enqueue(chain, body.context, queue=body.queue,
                                                    options=options, run_id=run_id,
                                                    idempotency_key=request_key, meta=meta)
                return await self.view(queued), before is None
            run = await self.runtime.start(chain, body.context, options, run_id=run_id,
                                           meta=meta, idempotency_key=request_key)
        except IdempotencyKeyError as exc:
            if key is not None:
                raise
            raise ApiError(409, "conflict", f"run {exc.run_id!r} exists and was started by "
                           "another request", fix="choose another run_id, or leave it out"
                           ) from None
        with contextlib.suppress(ChainlabError):  # durable before it is announced
            await self.store.flush(run.run_id, run.epoch)
        if run.replayed:
            return await self.view(run.run_id), False
        return run_dict(run.record, run.state), True

    async def _named(self, key: str | None) -> str | None:
        """The run an idempotency key names already (None: none, or no key)."""
        if key is None:
            return None
        return await self.runtime.run_io(self.store.run_for_key, key)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ control
    async def resume(self, run_id: str, *, force: bool) -> dict[str, Any]:
        """``POST /runs/{run_id}/resume``: continue the run in this server (after a crash,
        a restart, or to take over a run nobody drives). Already driven here: nothing to do.
        Raises ApiError 409 for a run that ended; DriverAliveError (409) while another live
        process drives it (unless ``force``)."""
        if self.runtime.driven(run_id) is None:
            _, _, state = await self.read(run_id)
            if state.status in RUN_TERMINAL:
                raise ApiError(409, "conflict",
                               f"run {run_id!r} already ended ({state.status}); nothing to "
                               "resume", fix=f"fork it: POST /runs/{run_id}/fork")
            await self.runtime.resume(run_id, force=force)
        return await self.view(run_id)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """``POST /runs/{run_id}/cancel``: stop the run (running calls are cancelled, then
        completed steps compensated, as the run's options say). A run nobody drives is
        taken over first; one another live process drives is refused (409)."""
        run = await self._drive(run_id, force=False, ended="cancel")
        await run.cancel()
        return await self.view(run_id)

    async def rollback(self, run_id: str, *, force: bool) -> dict[str, Any]:
        """``POST /runs/{run_id}/rollback``: compensate the completed steps in reverse
        completion order (an ended run too)."""
        _, _, state = await self.read(run_id)
        check_rollback(state)
        run = await self._drive(run_id, force=force, ended=None)
        await run.rollback()
        return await self.view(run_id)

    async def _drive(self, run_id: str, *, force: bool, ended: str | None) -> Any:
        """The run's live handle in this server, taking it over when nobody drives it."""
        run = self.runtime.driven(run_id)
        if run is not None:
            return run
        _, _, state = await self.read(run_id)
        if ended is not None and state.status in RUN_TERMINAL:
            raise ApiError(409, "conflict", f"cannot {ended} run {run_id!r}: it already ended "
                           f"({state.status})")
        return await self.runtime.resume(run_id, force=force)

    async def fork(self, run_id: str, body: Fork, *, by: str) -> tuple[dict[str, Any], bool]:
        """``POST /runs/{run_id}/fork``: a new run from a suspended or ended one (201), or
        with ``plan_only`` what it would do, step by step (200, nothing written)."""
        await self.read(run_id)  # the 404 with its did-you-mean
        edits: dict[str, Any] = {"args": body.args, "outputs": body.outputs,
                                 "context": body.context, "rerun": body.rerun}
        if body.plan_only:
            plan = await self.runtime.fork_plan(run_id, **edits)
            return {"parent": run_id, "parent_seq": plan.parent_seq, "chain": plan.chain.name,
                    "steps": plan.table()}, False
        meta = {**self.config.extra_meta, "source": "http", "started_by": by}
        if self.config.tools:
            meta["tools"] = self.config.tools
        run = await self.runtime.fork(run_id, meta=meta, **edits)
        return run_dict(run.record, run.state), True


def _with_actions(item: dict[str, Any]) -> dict[str, Any]:
    base = f"/runs/{item['run_id']}/steps/{item['step_id']}"
    actions = ("approve", "reject") if item["kind"] == "confirm" else ("resolve",)
    return {**item, "actions": {a: f"{base}/{a}" for a in actions}}


def _options(data: dict[str, Any] | None) -> RunOptions | None:
    if data is None:
        return None
    try:
        return RunOptions.model_validate(data)
    except ValidationError as exc:
        problems = [field_problem(err) for err in exc.errors()]
        for p in problems:
            p["field"] = f"options.{p['field']}" if p["field"] else "options"
        raise ApiError(422, "invalid_chain", f"{problems[0]['field']}: {problems[0]['message']}",
                       fix="see RunOptions in the API's schema for the fields and their "
                           "ranges", problems=problems) from None


def _check_key(key: str) -> None:
    if not key or len(key) > 255 or not key.isprintable():
        raise ApiError(400, "bad_request", "Idempotency-Key must be 1 to 255 printable "
                       "characters", fix="use a UUID: Idempotency-Key: $(uuidgen)")


def _key_run_id(key: str) -> str:
    """The run id an Idempotency-Key stands for when the request names none."""
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _encode_cursor(created_at: float, run_id: str) -> str:
    raw = json.dumps([created_at, run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    """The ``(created_at, run_id)`` a cursor of :func:`_encode_cursor` holds. Raises
    ApiError 400 for anything else (whatever it holds: deep JSON, huge numbers, garbage)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found = json.loads(raw)
        created_at, run_id = found
        if isinstance(created_at, bool) or not isinstance(created_at, int | float) \
                or not isinstance(run_id, str):
            raise ValueError("not a cursor")
        when = float(created_at)
        if not math.isfinite(when):
            raise ValueError("not a cursor")
        return when, to_json_value(run_id)  # type: ignore[no-any-return]
    except (ValueError, TypeError, OverflowError, RecursionError, NotJSONError):
        raise ApiError(400, "bad_request", f"?cursor={safe_repr(cursor)} is not a cursor this "
                       "server gave", fix="pass the next_cursor of the previous page as it is"
                       ) from None

