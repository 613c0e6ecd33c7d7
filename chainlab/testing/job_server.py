"""A small, real job backend for tests, demos and the docs (issue 27): an HTTP server run as
a SUBPROCESS on a loopback port, its jobs persisted in a JSON file, so a test can kill the
driver, restart the server, and still count submissions per key.
This module is the side tests use: ``JobServer`` starts, kills and restarts the server
process (:mod:`chainlab.testing.job_backend`), and ``http_job_class`` / ``register_http_job``
make a job type that talks to it.

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

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

from chainlab.testing.job_backend import request_json
from chainlab.tools import CallContext
from chainlab.tools.job import JobStatus

__all__ = ["JobServer", "http_job_class", "register_http_job"]


class JobServer:
    """Start the job server as a subprocess (``python -m chainlab.testing.job_backend``) on a
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
            [sys.executable, "-m", "chainlab.testing.job_backend", "--state", str(self.path),
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
        return request_json("GET", f"{self.url}/stats")  # type: ignore[no-any-return]

    def forget(self, job_id: str) -> None:
        with contextlib.suppress(urllib.error.HTTPError):
            request_json("DELETE", f"{self.url}/jobs/{job_id}")

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
            job = request_json("POST", f"{base}/jobs", body)
            if after_submit_s:
                time.sleep(after_submit_s)
            return {"id": job["id"], "url": base}

        def poll(self, handle: dict[str, Any]) -> JobStatus:
            try:
                job = request_json("GET", f"{handle['url']}/jobs/{handle['id']}")
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
                request_json("POST", f"{handle['url']}/jobs/{handle['id']}/cancel", {})

        def find(self, key: str) -> dict[str, Any] | None:
            from urllib.parse import quote

            jobs = request_json("GET", f"{base}/jobs?key={quote(key)}")
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
