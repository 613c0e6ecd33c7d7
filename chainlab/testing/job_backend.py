"""The process behind :class:`~chainlab.testing.job_server.JobServer` (issue 27): an HTTP
server on a loopback port whose jobs are kept in a JSON file, so it can be killed and started
again on the same file with the jobs, their clocks and the counts intact.

``python -m chainlab.testing.job_backend --state FILE --options JSON`` prints ``PORT <n>``
once it listens, then serves until killed. It implements the HTTP API, the job lifecycle and
the options that :mod:`chainlab.testing.job_server` documents (the side tests and notebooks
use); a thread of its own sends the callbacks of ended jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["main", "request_json", "serve"]


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
                request_json("POST", url, job, timeout=5.0)


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


def request_json(method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
    """One JSON request (``body`` sent as JSON when given), its JSON answer; raises
    ``urllib.error.HTTPError`` for an error status (used by the callbacks and the client)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def main(argv: list[str] | None = None) -> None:
    """``python -m chainlab.testing.job_backend --state FILE [--port N] [--options JSON]``."""
    parser = argparse.ArgumentParser(prog="python -m chainlab.testing.job_backend")
    parser.add_argument("--state", required=True, help="the JSON file that keeps the jobs")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--options", default="{}", help="JSON: duration_s, dedupe, ...")
    args = parser.parse_args(argv)
    serve(args.state, json.loads(args.options), args.port)


if __name__ == "__main__":
    main()
