from __future__ import annotations

import itertools
from typing import Any

import pytest

from chainlab import CallContext, JobStatus, Toolbox


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeBackend:
    """An in-memory job backend whose jobs end when a test says so (``finish``/``fail``)
    or after ``polls_to_finish`` polls; counts submissions per key, polls and cancels."""

    def __init__(self, polls_to_finish: int | None = None, dedupe: bool = False):
        self.polls_to_finish = polls_to_finish
        self.dedupe = dedupe
        self.jobs: dict[str, dict[str, Any]] = {}
        self.submissions: dict[str, int] = {}
        self.cancels: list[str] = []
        self.polls = 0
        self._ids = itertools.count(1)

    def submit(self, key: str, payload: Any) -> str:
        if self.dedupe:
            for job_id, job in self.jobs.items():
                if job["key"] == key:
                    return job_id
        job_id = f"j{next(self._ids)}"
        self.jobs[job_id] = {"key": key, "payload": payload, "state": "running", "polls": 0,
                             "output": None}
        self.submissions[key] = self.submissions.get(key, 0) + 1
        return job_id

    def status(self, job_id: str) -> JobStatus:
        self.polls += 1
        job = self.jobs.get(job_id)
        if job is None:
            return JobStatus.not_found()
        job["polls"] += 1
        if self.polls_to_finish is not None and job["polls"] >= self.polls_to_finish \
                and job["state"] == "running":
            job["state"], job["output"] = "succeeded", {"done": job["payload"]}
        if job["state"] == "succeeded":
            return JobStatus.succeeded(job["output"])
        if job["state"] == "failed":
            return JobStatus.failed("it broke")
        if job["state"] == "cancelled":
            return JobStatus.cancelled()
        return JobStatus.running(progress=min(0.99, job["polls"] / 10))

    def finish_all(self, output: Any = None) -> None:
        for job in self.jobs.values():
            if job["state"] == "running":
                job["state"] = "succeeded"
                job["output"] = output if output is not None else {"done": job["payload"]}

    def register(self, tb: Toolbox, name: str = "remote", **meta: Any) -> Any:
        backend = self

        class Remote:
            async def submit(self, payload: dict[str, Any], ctx: CallContext) -> dict:
                return {"id": backend.submit(ctx.idempotency_key, payload)}

            async def poll(self, handle: dict) -> JobStatus:
                return backend.status(handle["id"])

            async def cancel(self, handle: dict) -> None:
                backend.cancels.append(handle["id"])
                backend.jobs[handle["id"]]["state"] = "cancelled"

        meta.setdefault("poll_every_s", 0.01)
        return tb.job(Remote, name=name, **meta)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()
