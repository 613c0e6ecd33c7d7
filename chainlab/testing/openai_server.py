"""``FakeOpenAI``: a scripted OpenAI-compatible HTTP server (stdlib only).

For tests, tutorials and demos: the real ``openai`` client talks HTTP to it, so everything
between the planner and the wire is exercised. Each ``POST .../chat/completions`` consumes
the next item of its script, in order (:mod:`chainlab.testing.openai_script` lists what an
item can be: a plan, text, an HTTP status, a delay, ``Delay``, ``Reply`` or a callable).
When the script is used up, the server answers 500 and counts ``server.unexpected``.
Every request is recorded (``server.requests``, each a ``RecordedRequest``), so tests can
assert the repair prompt and the ``response_format``. ``GET .../models`` lists ``model``.
``keep_alive=True`` keeps connections open between requests as a real server does (by
default each answer closes its own); ``server.connections`` counts those accepted.

``like`` makes the server take only what a kind of real server takes (:data:`SERVER_KINDS`);
a request asking for more is refused the way that server refuses it, without consuming a
script item (``server.refused`` counts them):

=======================  =================================================================
``like``                 takes
=======================  =================================================================
``"openai"`` (default)   every ``response_format`` type and tool calling
``"llama-cpp-python"``   ``response_format`` ``text`` / ``json_object`` (with a schema) and
                         tools; ``json_schema`` gets HTTP 500 with FastAPI's validation
                         text (a server file path included), as llama-cpp-python 0.3 answers
``"no-response-format"`` neither ``response_format`` (HTTP 400 naming it) nor ``tools``
                         (HTTP 422, a FastAPI validation body): plain chat only
=======================  =================================================================

A request that forces a function (``tool_choice``) on a server that takes tools is answered
with a call of that function whose arguments are the reply's content. A scripted answer may
ask for tool calls (``Call``, ``tool_calls(...)``: parallel calls, arguments that are not
JSON, a function that does not exist), and a request with ``stream: true`` gets the answer
as server-sent chunks (:func:`stream_chunks`), as an OpenAI server streams it.

    with FakeOpenAI(script=[plan_dict, "not json", 500]) as server:
        planner = OpenAIPlanner(model="fake", base_url=server.base_url, api_key="test")
    with FakeOpenAI(script=[plan_dict], like="llama-cpp-python") as server:
        ...  # the planner's json_schema request is refused, json_object gets the plan
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chainlab.testing.openai_script import RecordedRequest, Reply, as_reply, stream_chunks

__all__ = ["SERVER_KINDS", "FakeOpenAI", "ServerKind", "stream_chunks"]


@dataclass(frozen=True, slots=True)
class ServerKind:
    """What a kind of OpenAI-compatible server takes (``response_formats``: the
    ``response_format`` types; ``tools``: tool calling) and how it refuses the rest:
    ``refusal(what)`` gives the status and JSON body for ``what`` (``"json_schema"``,
    ``"response_format"``, ``"tools"``)."""

    name: str
    response_formats: frozenset[str]
    tools: bool
    refusal: Callable[[str], tuple[int, dict[str, Any]]]

    def refuses(self, request: RecordedRequest) -> tuple[int, dict[str, Any]] | None:
        """The refusal for ``request``, or None when this kind of server takes it."""
        fmt = request.response_format
        if fmt is not None:
            kind = fmt.get("type") if isinstance(fmt, dict) else None
            if kind not in self.response_formats:
                return self.refusal(str(kind) if self.response_formats else "response_format")
        if (request.tools or request.forced_function) and not self.tools:
            return self.refusal("tools")
        return None


# llama-cpp-python's server (0.3) answers a request its pydantic model rejects with 500 and
# FastAPI's text of the validation error: the error, then where (a file of the server's
# machine and the route), as below for a response_format of type json_schema
_LLAMA_CPP_PYTHON_500 = (
    "1 validation error:\n"
    "  {{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input "
    "should be 'text' or 'json_object'\", 'input': '{what}', 'ctx': {{'expected': \"'text' or "
    "'json_object'\"}}}}\n\n"
    '  File "/opt/llm/venv/lib/python3.11/site-packages/llama_cpp/server/app.py", line 376, '
    "in create_chat_completion\n"
    "    POST /v1/chat/completions")


def _llama_cpp_python_refusal(what: str) -> tuple[int, dict[str, Any]]:
    return 500, {"error": {"message": _LLAMA_CPP_PYTHON_500.format(what=what),
                           "type": "internal_server_error", "param": None, "code": None}}


def _plain_chat_refusal(what: str) -> tuple[int, dict[str, Any]]:
    if what == "tools":  # FastAPI's validation answer for a field the model forbids
        return 422, {"detail": [{"type": "extra_forbidden", "loc": ["body", "tools"],
                                 "msg": "Extra inputs are not permitted"}]}
    return 400, error_body(400, "Unrecognized request argument supplied: response_format")


#: The kinds of server ``FakeOpenAI(like=...)`` plays.
SERVER_KINDS: dict[str, ServerKind] = {
    "openai": ServerKind("openai", frozenset({"text", "json_object", "json_schema"}), True,
                         lambda what: (400, error_body(400, f"unsupported: {what}"))),
    "llama-cpp-python": ServerKind("llama-cpp-python", frozenset({"text", "json_object"}),
                                   True, _llama_cpp_python_refusal),
    "no-response-format": ServerKind("no-response-format", frozenset(), False,
                                     _plain_chat_refusal),
}


class FakeOpenAI:
    """A scripted OpenAI-compatible server on ``127.0.0.1`` (a free port), in a thread.

    Use as a context manager, or ``start()`` / ``close()``. ``base_url`` ends in ``/v1``.
    ``like``: the kind of server to play (a key of :data:`SERVER_KINDS` or a
    :class:`ServerKind`); ``keep_alive``: keep connections open between requests. Raises
    ValueError for an unknown kind.
    """

    def __init__(self, script: Iterable[Any] = (), *, model: str = "fake-model",
                 host: str = "127.0.0.1", like: str | ServerKind = "openai",
                 keep_alive: bool = False):
        if isinstance(like, str):
            if like not in SERVER_KINDS:
                raise ValueError(f"unknown server kind {like!r}; choose from "
                                 f"{sorted(SERVER_KINDS)} or pass a ServerKind")
            like = SERVER_KINDS[like]
        self.like = like
        self.keep_alive = keep_alive
        self.refused = 0
        self.script: list[Any] = list(script)
        self.model = model
        self.host = host
        self.requests: list[RecordedRequest] = []
        self.unexpected = 0
        self.connections = 0
        #: ``(time.perf_counter(), text)`` of every piece of text or arguments streamed
        self.pieces: list[tuple[float, str]] = []
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeOpenAI:
        """Start serving (idempotent). Returns self."""
        if self._server is not None:
            return self
        self._stop.clear()
        server = ThreadingHTTPServer((self.host, 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.05}, name="FakeOpenAI", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; delayed answers still pending are cut short."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake server is not running; call start() or use `with`")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (pass it as the client's ``base_url``)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def remaining(self) -> int:
        """Script items not consumed yet."""
        return len(self.script) - self._next

    def add(self, *items: Any) -> None:
        """Append items to the script (e.g. between notebook cells)."""
        with self._lock:
            self.script.extend(items)

    @property
    def completions(self) -> list[RecordedRequest]:
        """The chat-completion requests received, in order."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # ------------------------------------------------------------------ answering
    def _take(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            refusal = self.like.refuses(request)
            if refusal is not None:  # refused before the script is looked at
                self.refused += 1
                status, body = refusal
                return Reply(status=status, body=body)
            if self._next >= len(self.script):
                self.unexpected += 1
                return Reply(status=500, error="fake server: the script is used up "
                             f"({len(self.script)} items); add more replies")
            item = self.script[self._next]
            self._next += 1
        while callable(item) and not isinstance(item, type):
            item = item(request)
        return as_reply(item)

    def completion_body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        """The JSON body of a successful chat completion carrying ``reply``."""
        if reply.body is not None:
            return reply.body
        content = reply.content if reply.refusal is None else None
        message: dict[str, Any] = {"role": "assistant", "content": content,
                                   "refusal": reply.refusal}
        finish = "stop"
        function = request.forced_function
        if reply.tool_calls:  # the model asks for tool calls (several: parallel calls)
            message["tool_calls"] = [
                {"id": c.call_id or f"call_{next(self._ids)}", "type": "function",
                 "function": {"name": c.function, "arguments": c.arguments_text()}}
                for c in reply.tool_calls]
            finish = "tool_calls"
        elif function is not None and content is not None:  # answer with the forced call
            message = {"role": "assistant", "content": None, "refusal": None,
                       "tool_calls": [{"id": f"call_fake_{next(self._ids)}", "type": "function",
                                       "function": {"name": function, "arguments": content}}]}
            finish = "tool_calls"
        said = len(content or "") + sum(len(c.arguments_text()) for c in reply.tool_calls)
        usage = reply.usage or {"prompt_tokens": len(request.text()) // 4,
                                "completion_tokens": said // 4}
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": request.model or self.model,
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                         "message": message}],
            "usage": {**usage, "total_tokens": sum(usage.values())},
        }

    def sent(self, chunk: dict[str, Any] | None) -> None:
        """Note the moment a streamed chunk's text or arguments piece was sent."""
        for choice in (chunk or {}).get("choices") or ():
            delta = choice.get("delta") or {}
            piece = delta.get("content") or "".join(
                (c.get("function") or {}).get("arguments") or ""
                for c in delta.get("tool_calls") or ())
            if piece:
                self.pieces.append((time.perf_counter(), piece))

    def wait_or_stop(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server closes first (then True)."""
        return self._stop.wait(seconds) if seconds > 0 else False


def error_body(status: int, message: str | None) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message or f"fake server: scripted HTTP {status}",
                      "type": kind, "param": None, "code": None}}


def _include_usage(request: RecordedRequest) -> bool:
    options = request.body.get("stream_options") if isinstance(request.body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections += 1

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if not server.keep_alive:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout) and closed the socket
                pass
            self.close_connection = not server.keep_alive or self.close_connection

        def _record(self, body: Any) -> RecordedRequest:
            headers = {k.lower(): v for k, v in self.headers.items()}
            return RecordedRequest(self.command, self.path, headers, body)

        def do_GET(self) -> None:
            server.requests.append(self._record(None))
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": server.model, "object": "model", "created": 0, "owned_by": "fake"}]})
            else:
                self._send(404, error_body(404, f"fake server: no route GET {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = self._record(body)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                server.requests.append(request)
                self._send(404, error_body(404, f"fake server: no route POST {self.path}"))
                return
            reply = server._take(request)
            if server.wait_or_stop(reply.delay_s):
                self.close_connection = True
                return  # closing: drop the connection without an answer
            if reply.status != 200:
                self._send(reply.status, reply.body or error_body(reply.status, reply.error))
            elif request.stream:
                self._send_stream(stream_chunks(server.completion_body(reply, request),
                                                _include_usage(request)), reply.gap_s)
            else:
                self._send(200, server.completion_body(reply, request))

        def _send_stream(self, chunks: list[dict[str, Any]], gap_s: float = 0.0) -> None:
            events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                if not server.keep_alive:
                    self.send_header("Connection", "close")
                self.end_headers()
                for n, event in enumerate(events):  # one HTTP chunk per event, as a server
                    if n and server.wait_or_stop(gap_s):  # streams them
                        self.close_connection = True
                        return
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    server.sent(chunks[n] if n < len(chunks) else None)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
            self.close_connection = not server.keep_alive or self.close_connection

    return Handler

