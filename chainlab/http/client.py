"""``Client``: the chainlab HTTP API from any Python program (httpx and httpx-sse).

::

    from chainlab.http import Client

    with Client("http://127.0.0.1:8000", token=TOKEN) as api:
        run = api.start("refund", {"order": "A-17"})           # a served chain, by name
        for ev in api.stream(run["run_id"]):                   # reconnects by itself
            if ev.event == "step_waiting_confirmation":
                api.approve(run["run_id"], ev.data["step_id"], by="alice")
        print(api.get(run["run_id"])["status"])

Blocking calls (one API; an async program calls them in a worker thread, or uses httpx
directly: the endpoints are plain JSON). Every error response raises
:class:`~chainlab.http.errors.ApiError` with the server's ``error``, ``message``, ``fix``
and ``problems``.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

from chainlab.http.errors import ApiError

__all__ = ["Client", "StreamEvent", "new_run_id"]

_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One Server-Sent Event of ``GET /runs/{run_id}/stream``: ``event`` (the event's kind,
    or ``metadata`` / ``end``), ``seq`` (the SSE id: the event's seq; None for metadata and
    end) and ``data`` (the event as JSON data)."""

    event: str
    seq: int | None
    data: dict[str, Any]


class Client:
    """A client of one chainlab server. ``token`` defaults to ``CHAINLAB_TOKEN``;
    ``timeout``: seconds per request (long polls and streams set their own);
    ``retries``: how often ``start`` resends a request whose answer was lost (with the same
    Idempotency-Key: never a second run). ``transport``: an httpx transport (tests)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None, *,
                 timeout: float = 30.0, retries: int = 2,
                 transport: httpx.BaseTransport | None = None):
        token = token if token is not None else os.environ.get("CHAINLAB_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, Any] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: float | None = None, content: str | bytes | None = None) -> Any:
        """One call: the response's JSON (text for a non-JSON answer). Raises ApiError for
        an error response, httpx.TransportError when the server cannot be reached."""
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = timeout
        response = self._http.request(method, path, json=json, content=content,
                                      params=_params(params), headers=dict(headers or {}),
                                      **extra)
        return _answer(response)

    # ------------------------------------------------------------------ chains
    def health(self) -> dict[str, Any]:
        return self.request("GET", "/healthz")  # type: ignore[no-any-return]

    def chains(self) -> list[dict[str, Any]]:
        """The served chains (name, description, step count, tools used)."""
        return self.request("GET", "/chains")["chains"]  # type: ignore[no-any-return]

    def chain(self, name: str) -> dict[str, Any]:
        """One chain: steps, tools, the JSON Schema of its context, its definition."""
        return self.request("GET", f"/chains/{name}")  # type: ignore[no-any-return]

    def validate(self, text: str, *, yaml: bool = True,
                 context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every problem of a chain's YAML (or JSON) text: ``{valid, chain, problems}``."""
        import json as _json

        params = {"context": _json.dumps(dict(context))} if context is not None else None
        kind = "application/yaml" if yaml else "application/json"
        return self.request("POST", "/chains/validate", content=text,  # type: ignore[no-any-return]
                            headers={"Content-Type": kind}, params=params)

    # ------------------------------------------------------------------ runs
    def start(self, chain: str | Mapping[str, Any], context: Mapping[str, Any] | None = None,
              *, options: Mapping[str, Any] | None = None, run_id: str | None = None,
              idempotency_key: str | None = None, wait: bool = False,
              timeout: float = 30.0) -> dict[str, Any]:
        """Start a run of a served chain (its name) or an inline chain (its definition):
        the run's view. ``wait``: return once it ended or waits for a person (at most
        ``timeout`` s). The run's id is chosen here unless given (or an
        ``idempotency_key`` names the request), and a request whose answer was lost is
        sent again with it: the server starts one run whatever happens on the way."""
        body: dict[str, Any] = {"chain": chain if isinstance(chain, str) else dict(chain),
                                "context": dict(context or {})}
        if options is not None:
            body["options"] = dict(options)
        headers = {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        else:
            body["run_id"] = run_id or new_run_id()
        path = "/runs/wait" if wait else "/runs"
        params = {"timeout": timeout} if wait else None
        for attempt in range(self.retries + 1):
            try:
                return self.request("POST", path, json=body, headers=headers,  # type: ignore[no-any-return]
                                    params=params, timeout=timeout + 30 if wait else None)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def runs(self, *, status: str | Iterable[str] | None = None, chain: str | None = None,
             waiting: bool | None = None, limit: int | None = None,
             cursor: str | None = None) -> dict[str, Any]:
        """One page of runs, newest first: ``{runs, next_cursor}``."""
        if status is not None and not isinstance(status, str):
            status = ",".join(status)
        return self.request("GET", "/runs", params={  # type: ignore[no-any-return]
            "status": status, "chain": chain, "waiting": waiting, "limit": limit,
            "cursor": cursor})

    def get(self, run_id: str) -> dict[str, Any]:
        """The run's JSON view (status, steps, outputs, what waits, lineage, last_seq)."""
        return self.request("GET", f"/runs/{run_id}")  # type: ignore[no-any-return]

    def events(self, run_id: str, after: int = 0, limit: int | None = None) -> dict[str, Any]:
        """One page of the stored event log: ``{events, last_seq, next_after}``."""
        return self.request("GET", f"/runs/{run_id}/events",  # type: ignore[no-any-return]
                            params={"after": after, "limit": limit})

    def state(self, run_id: str, at: int) -> dict[str, Any]:
        """The run as it was right after its event ``at`` (time travel)."""
        return self.request("GET", f"/runs/{run_id}/state",  # type: ignore[no-any-return]
                            params={"at": at})

    def wait(self, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Block until the run ended or waits for a person (at most ``timeout`` s)."""
        return self.request("GET", f"/runs/{run_id}/wait",  # type: ignore[no-any-return]
                            params={"timeout": timeout}, timeout=timeout + 30)

    def stream(self, run_id: str, *, after: int = 0, kinds: Iterable[str] | None = None,
               reconnect: bool = True, max_reconnects: int = 10, backoff_s: float = 0.5,
               metadata: bool = False) -> Iterator[StreamEvent]:
        """The run's events (stored, then live) as :class:`StreamEvent`, ending with the
        ``end`` event. A dropped connection is reopened with ``Last-Event-ID`` = the last
        seq received (up to ``max_reconnects`` times in a row): every event comes once.
        ``metadata``: also yield each connection's first ``metadata`` event."""
        last = after
        failures = 0
        params = {"kinds": ",".join(kinds)} if kinds else {}
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                with connect_sse(self._http, "GET", f"/runs/{run_id}/stream", params=params,
                                 headers=headers,
                                 timeout=httpx.Timeout(30.0, read=60.0)) as source:
                    if source.response.status_code != 200:
                        source.response.read()
                        _answer(source.response)
                    for sse in source.iter_sse():
                        if not sse.data:
                            continue  # a keep-alive comment (httpx-sse yields it, with
                            # the last id, as an empty event)
                        data = _json_data(sse.data)
                        if sse.event == "metadata":
                            if metadata:
                                yield StreamEvent("metadata", None, data)
                            continue
                        if sse.event == "error":
                            raise ApiError.from_body(500, data)
                        if sse.event == "end":
                            yield StreamEvent("end", None, data)
                            return
                        if sse.event == "delta":  # a piece of a model's answer: no seq
                            yield StreamEvent("delta", None, data)
                            continue
                        seq = int(sse.id) if sse.id else None
                        if seq is not None:
                            if seq <= last:
                                continue  # never twice, whatever the connection did
                            last = seq
                        failures = 0
                        yield StreamEvent(sse.event, seq, data)
            except (httpx.TransportError, SSEError):
                pass
            except ApiError as exc:
                if exc.status < 500:
                    raise
            failures += 1  # the stream ended without `end`: reconnect from `last`
            if not reconnect or failures > max_reconnects:
                raise ApiError(503, "stream_lost", f"the stream of run {run_id!r} was cut "
                               f"{failures} times in a row (last event received: {last})",
                               fix=f"stream again with after={last}")
            time.sleep(backoff_s * min(failures, 4))

    # ------------------------------------------------------------------ decisions
    def confirmations(self, run_id: str) -> list[dict[str, Any]]:
        """What waits for a person in the run (tool, args, preview, since when)."""
        return self.request("GET", f"/runs/{run_id}/confirmations")["waiting"]  # type: ignore[no-any-return]

    def approvals(self) -> list[dict[str, Any]]:
        """Everything that waits for a person, across unfinished runs, oldest first."""
        return self.request("GET", "/approvals")["waiting"]  # type: ignore[no-any-return]

    def stalled(self) -> list[dict[str, Any]]:
        """The runs that stand still with no step to decide: nobody drives one (``action``
        ``resume``), or a queued one waits for the run holding its concurrency key."""
        return self.request("GET", "/approvals")["stalled"]  # type: ignore[no-any-return]

    def decide(self, run_id: str, step_id: str, action: str, **fields: Any) -> dict[str, Any]:
        """``approve`` / ``reject`` / ``resolve`` with the body ``fields``. Raises ApiError:
        409 ``not_waiting`` (``.extra["decided"]`` says who decided), 422 for args or an
        output that do not fit."""
        body = {k: v for k, v in fields.items() if v is not _MISSING}
        return self.request("POST", f"/runs/{run_id}/steps/{step_id}/{action}",  # type: ignore[no-any-return]
                            json=body)

    def approve(self, run_id: str, step_id: str, *, args: Mapping[str, Any] | None = None,
                note: str | None = None, by: str | None = None,
                budget: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Approve a waiting step (with ``args``: run those instead; with ``budget``: raise
        the run's budget, for a step its budget stopped)."""
        return self.decide(run_id, step_id, "approve",
                           **_given(args=dict(args) if args is not None else None,
                                    note=note, by=by,
                                    budget=dict(budget) if budget is not None else None))

    def approve_all(self, run_id: str, step_id: str, *, note: str | None = None,
                    by: str | None = None) -> list[str]:
        """Approve every step waiting at or under ``step_id`` (a ``for_each`` step's
        instances), each with its own args. Returns the ids approved. Raises ApiError (409
        ``not_waiting`` when nothing waits there)."""
        out = self.request("POST", f"/runs/{run_id}/steps/{step_id}/approve-all",
                           json=_given(note=note, by=by))
        return list(out["approved"])

    def reject(self, run_id: str, step_id: str, reason: str, *,
               by: str | None = None) -> dict[str, Any]:
        """Reject a waiting step."""
        return self.decide(run_id, step_id, "reject", **_given(reason=reason, by=by))

    def resolve(self, run_id: str, step_id: str, *, output: Any = _MISSING,
                retry: bool = False, fail: bool = False, note: str | None = None,
                by: str | None = None) -> dict[str, Any]:
        """Resolve an in-doubt step: exactly one of ``output=``, ``retry=True``,
        ``fail=True``."""
        fields = _given(retry=retry or None, fail=fail or None, note=note, by=by)
        if output is not _MISSING:
            fields["output"] = output
        return self.decide(run_id, step_id, "resolve", **fields)

    # ------------------------------------------------------------------ control
    def resume(self, run_id: str, *, force: bool = False) -> dict[str, Any]:
        """Continue the run in the server (after a crash or restart)."""
        return self.request("POST", f"/runs/{run_id}/resume",  # type: ignore[no-any-return]
                            json=_given(force=force or None))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self.request("POST", f"/runs/{run_id}/cancel", json={})  # type: ignore[no-any-return]

    def rollback(self, run_id: str, *, force: bool = False) -> dict[str, Any]:
        return self.request("POST", f"/runs/{run_id}/rollback",  # type: ignore[no-any-return]
                            json=_given(force=force or None))

    def fork(self, run_id: str, *, args: Mapping[str, Any] | None = None,
             outputs: Mapping[str, Any] | None = None,
             context: Mapping[str, Any] | None = None, rerun: Iterable[str] | None = None,
             plan_only: bool = False) -> dict[str, Any]:
        """A new run from this one (or, ``plan_only``, what it would do per step)."""
        return self.request("POST", f"/runs/{run_id}/fork", json=_given(  # type: ignore[no-any-return]
            args=dict(args) if args is not None else None,
            outputs=dict(outputs) if outputs is not None else None,
            context=dict(context) if context is not None else None,
            rerun=list(rerun) if rerun is not None else None, plan_only=plan_only or None))


def new_run_id() -> str:
    """A run id chosen by the client: the time, then 8 random hex digits (the runtime's
    style, with more randomness: several clients choose ids at once)."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(4)


def _given(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
    out = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _json_data(text: str) -> dict[str, Any]:
    import json

    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {"text": text}
    return data if isinstance(data, dict) else {"value": data}


def _answer(response: httpx.Response) -> Any:
    kind = response.headers.get("content-type", "")
    try:
        body = response.json() if "json" in kind else response.text
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise ApiError.from_body(response.status_code, body)
    return body
