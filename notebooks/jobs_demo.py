"""The tools of tutorial 09 (remote jobs): two training jobs on the chainlab test job server
(``chainlab.testing.job_server``: a real HTTP server in its own process that keeps its jobs
in a file and counts submissions per key) and two ordinary steps.

Run as a script, it is the driver the notebook kills: it starts the chain and drives it
until it is killed (SIGKILL) or the run ends.

    python jobs_demo.py start .chainlab/jobs.db http://127.0.0.1:PORT RUN_ID
"""

from __future__ import annotations

import sys

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.job_server import register_http_job

__all__ = ["CHAIN", "make_toolbox"]

CHAIN = Chain.from_yaml("""
name: train_and_compare
options: {max_concurrency: 1}   # ONE slot: the jobs wait without holding it
steps:
  - id: prepare
    tool: prepare
    args: {dataset: flowers}
  - id: train_small
    tool: train
    args: {payload: {data: "{{ steps.prepare.output }}", size: small}}
  - id: train_large
    tool: train
    args: {payload: {data: "{{ steps.prepare.output }}", size: large}}
  - id: report
    tool: report
    args: {title: flowers}
  - id: compare
    tool: compare
    args: {a: "{{ steps.train_small.output }}", b: "{{ steps.train_large.output }}"}
""")


def make_toolbox(url: str) -> Toolbox:
    tb = Toolbox("jobs_demo")
    register_http_job(tb, url, name="train", poll_every_s=0.1, timeout_s=600)

    @tb.tool
    def prepare(dataset: str) -> str:
        """Split the data set (an ordinary, quick step)."""
        return f"{dataset}/split"

    @tb.tool
    async def report(title: str) -> str:
        """An ordinary step that takes a while: it runs while the jobs wait."""
        await anyio.sleep(0.5)
        return f"report on {title}"

    @tb.tool
    def compare(a: dict, b: dict) -> str:
        return f"{a['payload']['size']} vs {b['payload']['size']}: both {a['result']}"

    return tb


async def _start(db: str, url: str, run_id: str) -> None:
    runtime = Runtime(make_toolbox(url), SQLiteStore(db))
    run = await runtime.start(CHAIN, run_id=run_id)
    await run.wait()
    await runtime.aclose()


if __name__ == "__main__":
    if sys.argv[1:2] != ["start"] or len(sys.argv) != 5:
        sys.exit("usage: python jobs_demo.py start DB URL RUN_ID")
    anyio.run(_start, *sys.argv[2:])
