"""A small, real job backend for tests, demos and the docs (issue 27): an HTTP server run as
a SUBPROCESS on a loopback port, its jobs persisted in a JSON file, so a test can kill the
driver, restart the server, and still count submissions per key.

    with JobServer(tmp_path / "jobs.json", duration_s=0.5, dedupe=False) as server:
        Remote = register_http_job(toolbox, server.url, name="remote", find=True)
        ...
        assert server.stats()["submissions"] == {key: 1}

HTTP API (JSON bodies):

===============================  ==================================================================
``POST /jobs``                   ``{key, payload, duration_s?, fail?, callback_url?}`` -> the job.
                                 With ``dedupe`` on, a key seen before returns its job (no new
                                 submission). ``submit_latency_s`` is spent AFTER the job is stored
                                 and before the answer (the window in which a driver can die
                                 knowing nothing of a job that exists)
                                 (``accept_latency_s`` is spent BEFORE it is stored)
``GET /jobs/<id>``               the job: ``id, key, state, progress, output, error`` (404: unknown)
``GET /jobs?key=K``              the jobs submitted under ``K`` (``find``)
``POST /jobs/<id>/cancel``       cancel it (idempotent; counted)
``DELETE /jobs/<id>``            forget it (then ``GET`` says 404: a history that expired)
``GET /stats``                   ``submissions`` per key, ``cancels`` per id, ``polls``, ``jobs``,
                                 ``received`` (submit requests that arrived, since it started),
                                 ``answered`` per key (submit answers sent in full)
===============================  ==================================================================

A job runs ``duration_s`` from its submission (progress = elapsed / duration, in
``progress_steps`` steps), then succeeds with ``{"key", "payload", "result": "done"}`` or,
with ``fail``, fails. ``poll_errors=N`` answers HTTP 500 to the first N polls of every job;
``callback_url`` gets a ``POST`` with the job when it ends (the server's timer thread).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from chainlab.tools import CallContext
from chainlab.tools.job import JobStatus

__all__ = ["JobServer", "http_job_class", "register_http_job", "serve"]


# ============================================================================ the server side
class _Backend:
    def __init__(self, path: Path, opts: dict[str, Any]):
        self.path = path
        self.opts = opts
        self.lock = threading.Lock()
        if path.exists():
            self.data = json.loads(path.read_text() or "{}")
        else:
            self.data = {}
        self.data.setdefault("jobs", {})
        self.data.setdefault("submissions", {})
        self.data.setdefault("cancels", {})
        self.data.setdefault("polls", 0)
        self.received = 0  # submit requests that arrived (before they are stored)
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        os.replace(tmp, self.path)

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        key = str(body.get("key") or "")
        with self.lock:
            if self.opts.get("dedupe") and key:
                for job in self.data["jobs"].values():
                    if job["key"] == key:
                        return self._view(job)
            job = {"id": uuid.uuid4().hex[:12], "key": key, "payload": body.get("payload"),
                   "created": time.time(),
                   "duration_s": float(body.get("duration_s", self.opts.get("duration_s", 1.0))),
                   "fail": bool(body.get("fail", self.opts.get("fail", False))),
                   "cancelled": False, "polls": 0, "callback_url": body.get("callback_url"),
                   "called_back": False}
            self.data["jobs"][job["id"]] = job
            self.data["submissions"][key] = self.data["submissions"].get(key, 0) + 1
            self._save()
            return self._view(job)

    def answered(self, key: str) -> None:
        """The answer to a submission under ``key`` was sent in full."""
        with self.lock:
            answers = self.data.setdefault("answered", {})
            answers[key] = answers.get(key, 0) + 1
            self._save()

    def _view(self, job: dict[str, Any]) -> dict[str, Any]:
        elapsed = time.time() - job["created"]
        duration = max(job["duration_s"], 1e-9)
        steps = max(1, int(self.opts.get("progress_steps", 10)))
        out: dict[str, Any] = {"id": job["id"], "key": job["key"], "output": None,
                               "error": None, "progress": None}
        if job["cancelled"]:
            out["state"] = "cancelled"
        elif elapsed < duration:
            out["state"] = "running"
            out["progress"] = int(elapsed / duration * steps) / steps
        elif job["fail"]:
            out["state"] = "failed"
            out["error"] = f"job {job['id']} failed (the server was told to fail it)"
        else:
            out["state"] = "succeeded"
            out["progress"] = 1.0
            out["output"] = {"key": job["key"], "payload": job["payload"], "result": "done"}
        return out

    def get(self, job_id: str) -> tuple[int, dict[str, Any] | None]:
        with self.lock:
            job = self.data["jobs"].get(job_id)
            if job is None:
                return 404, None
            job["polls"] += 1
            self.data["polls"] += 1
            failing = job["polls"] <= int(self.opts.get("poll_errors", 0))
            self._save()
            if failing:
                return 500, {"error": "poll error (the server was told to fail polls)"}
            return 200, self._view(job)

    def find(self, key: str) -> list[dict[str, Any]]:
        with self.lock:
            return [self._view(j) for j in self.data["jobs"].values() if j["key"] == key]

    def cancel(self, job_id: str) -> tuple[int, dict[str, Any] | None]:
        with self.lock:
            job = self.data["jobs"].get(job_id)
            if job is None:
                return 404, None
            if self._view(job)["state"] == "running":
                job["cancelled"] = True
            self.data["cancels"][job_id] = self.data["cancels"].get(job_id, 0) + 1
            self._save()
            return 200, self._view(job)

    def forget(self, job_id: str) -> int:
        with self.lock:
            found = self.data["jobs"].pop(job_id, None)
            self._save()
            return 200 if found else 404

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"submissions": dict(self.data["submissions"]),
                    "cancels": dict(self.data["cancels"]), "polls": self.data["polls"],
                    "jobs": len(self.data["jobs"]), "received": self.received,
                    "answered": dict(self.data.get("answered", {}))}

    def callbacks_due(self) -> list[dict[str, Any]]:
        """Ended jobs whose callback was not sent yet (marked as sent)."""
        due = []
        with self.lock:
            for job in self.data["jobs"].values():
                if job["callback_url"] and not job["called_back"]:
                    view = self._view(job)
                    if view["state"] != "running":
                        job["called_back"] = True
                        due.append({**view, "callback_url": job["callback_url"]})
            if due:
                self._save()
        return due


def _handler(backend: _Backend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> bool:
            """Answer; False when the client is gone (killed while it waited)."""
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return False
            return True

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}") if n else {}

        def do_POST(self) -> None:
            parts = self.path.strip("/").split("/")
            if parts == ["jobs"]:
                body = self._body()
                with backend.lock:
                    backend.received += 1
                time.sleep(float(backend.opts.get("accept_latency_s", 0.0)))
                job = backend.submit(body)
                time.sleep(float(backend.opts.get("submit_latency_s", 0.0)))
                if self._send(200, job):
                    backend.answered(job["key"])
            elif len(parts) == 3 and parts[0] == "jobs" and parts[2] == "cancel":
                status, answer = backend.cancel(parts[1])
                self._send(status, answer or {"error": "unknown job"})
            else:
                self._send(404, {"error": f"no such endpoint {self.path}"})

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            parts = path.strip("/").split("/")
            if parts == ["stats"]:
                self._send(200, backend.stats())
            elif parts == ["jobs"] and query.startswith("key="):
                from urllib.parse import unquote

                self._send(200, backend.find(unquote(query[4:])))
            elif len(parts) == 2 and parts[0] == "jobs":
                time.sleep(float(backend.opts.get("poll_latency_s", 0.0)))
                status, body = backend.get(parts[1])
                self._send(status, body or {"error": "unknown job"})
            else:
                self._send(404, {"error": f"no such endpoint {self.path}"})

        def do_DELETE(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "jobs":
                self._send(backend.forget(parts[1]), {})
            else:
                self._send(404, {"error": f"no such endpoint {self.path}"})

    return Handler


def _call_back(backend: _Backend, stop: threading.Event) -> None:
    while not stop.wait(0.05):
        for job in backend.callbacks_due():
            url = job.pop("callback_url")
            with contextlib.suppress(OSError):
                _request("POST", url, job, timeout=5.0)


def serve(path: str | Path, opts: dict[str, Any], port: int = 0) -> None:
    """Run the server in this process (the subprocess's main): prints ``PORT <n>`` once it
    listens, then serves until killed."""
    backend = _Backend(Path(path), opts)
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(backend))
    httpd.daemon_threads = True
    stop = threading.Event()
    threading.Thread(target=_call_back, args=(backend, stop), daemon=True).start()
    print(f"PORT {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.05)
    finally:
        stop.set()


# ============================================================================ the client side
def _request(method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


class JobServer:
    """Start the job server as a subprocess (``python -m chainlab.testing.job_server``) on a
    loopback port, its jobs in ``path``. Options: ``duration_s``, ``accept_latency_s``,
    ``submit_latency_s``,
    ``poll_latency_s``, ``progress_steps``, ``fail``, ``dedupe``, ``poll_errors``.
    A context manager; ``restart()`` kills it (SIGKILL) and starts it again on the same
    file (the jobs, their clocks and the counts survive)."""

    def __init__(self, path: str | Path, **opts: Any):
        self.path = Path(path)
        self.opts = opts
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> JobServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chainlab.testing.job_server", "--state", str(self.path),
             "--port", str(self.port), "--options", json.dumps(self.opts)],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"the job server did not start (it printed {line!r})")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stats(self) -> dict[str, Any]:
        """``submissions`` per key, ``cancels`` per job id, ``polls``, ``jobs``."""
        return _request("GET", f"{self.url}/stats")  # type: ignore[no-any-return]

    def forget(self, job_id: str) -> None:
        with contextlib.suppress(urllib.error.HTTPError):
            _request("DELETE", f"{self.url}/jobs/{job_id}")

    def __enter__(self) -> JobServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def http_job_class(url: str, *, find: bool = True, duration_s: float | None = None,
                   fail: bool = False, after_submit_s: float = 0.0) -> type:
    """A job class for the server at ``url`` (sync methods: the runtime runs them in a worker
    thread). ``find=False`` leaves ``find`` out (a backend that cannot list by key).
    ``after_submit_s``: submit returns that long after the server answered (a client that
    does more work after the backend accepted the job: the window in which a driver dies
    between the submission and the record of its handle)."""
    base = url.rstrip("/")

    class RemoteJob:
        """Submit a job to the chainlab test job server and wait for it."""

        def submit(self, payload: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
            body: dict[str, Any] = {"key": ctx.idempotency_key, "payload": payload}
            if duration_s is not None:
                body["duration_s"] = duration_s
            if fail:
                body["fail"] = True
            job = _request("POST", f"{base}/jobs", body)
            if after_submit_s:
                time.sleep(after_submit_s)
            return {"id": job["id"], "url": base}

        def poll(self, handle: dict[str, Any]) -> JobStatus:
            try:
                job = _request("GET", f"{handle['url']}/jobs/{handle['id']}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return JobStatus.not_found(f"job {handle['id']} is unknown to the server")
                raise ConnectionError(f"job server answered HTTP {exc.code}") from None
            state = job["state"]
            if state == "running":
                return JobStatus.running(progress=job["progress"])
            if state == "succeeded":
                return JobStatus.succeeded(job["output"])
            if state == "failed":
                return JobStatus.failed(job["error"])
            return JobStatus.cancelled()

        def cancel(self, handle: dict[str, Any]) -> None:
            with contextlib.suppress(urllib.error.HTTPError):
                _request("POST", f"{handle['url']}/jobs/{handle['id']}/cancel", {})

        def find(self, key: str) -> dict[str, Any] | None:
            from urllib.parse import quote

            jobs = _request("GET", f"{base}/jobs?key={quote(key)}")
            return {"id": jobs[0]["id"], "url": base} if jobs else None

    if not find:
        del RemoteJob.find
    return RemoteJob


def register_http_job(toolbox: Any, url: str, *, name: str = "remote", find: bool = True,
                      dedupe_by_key: bool = False, duration_s: float | None = None,
                      fail: bool = False, after_submit_s: float = 0.0, **meta: Any) -> Any:
    """Register a job of the server at ``url`` in ``toolbox`` as ``name`` (its arg:
    ``payload``, a dict). Returns the JobTool."""
    meta.setdefault("poll_every_s", 0.05)
    return toolbox.job(http_job_class(url, find=find, duration_s=duration_s, fail=fail,
                                      after_submit_s=after_submit_s),
                       name=name, dedupe_by_key=dedupe_by_key, **meta)


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chainlab.testing.job_server")
    parser.add_argument("--state", required=True, help="the JSON file that keeps the jobs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--options", default="{}", help="JSON: duration_s, dedupe, ...")
    args = parser.parse_args(argv)
    serve(args.state, json.loads(args.options), args.port)


if __name__ == "__main__":
    _main()
