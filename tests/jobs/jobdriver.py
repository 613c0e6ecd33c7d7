"""A driver process of the remote-job crash trials: starts (or resumes) a run of a chain with
two remote jobs of the test job server (``chainlab.testing.job_server``), an ordinary tool
and a sub-chain, and prints a JSON report when the run settles. The parent kills it with
SIGKILL at random moments and resumes the run in a new process."""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import open_store
from chainlab.testing.job_server import register_http_job

CHAIN = """
name: jobs_trial
options: {max_concurrency: 4}
steps:
  - {id: prep, tool: double, args: {x: 1}}
  - {id: a, tool: remote, args: {payload: {n: "{{ steps.prep.output }}"}}}
  - {id: b, tool: remote, args: {payload: {n: 2}}}
  - {id: c, tool: double, args: {x: 3}}
  - {id: s, tool: "chain:sub", args: {}}
  - id: join
    tool: join
    args: {a: "{{ steps.a.output }}", b: "{{ steps.b.output }}", c: "{{ steps.c.output }}",
           s: "{{ steps.s.output }}"}
"""
#: a sub-chain in the same wave: an ordinary step, then a remote job
SUB = """
name: sub
steps:
  - {id: x, tool: double, args: {x: 5}}
  - {id: y, tool: remote, args: {payload: {n: "{{ steps.x.output }}"}}}
"""


def make_toolbox(url: str, *, find: bool, dedupe: bool) -> Toolbox:
    tb = Toolbox("jobs_trial")
    register_http_job(tb, url, name="remote", find=find, dedupe_by_key=dedupe,
                      poll_every_s=0.05, timeout_s=60, after_submit_s=0.04)

    @tb.tool
    def double(x: int) -> int:
        return 2 * x

    @tb.tool
    def join(a: dict, b: dict, c: int, s: dict) -> dict:
        return {"a": a["payload"], "b": b["payload"], "c": c, "s": s["y"]["payload"]}

    tb.add_chain(Chain.from_yaml(SUB))
    return tb


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("server")
    p.add_argument("run_id")
    p.add_argument("mode", choices=["start", "resume"])
    p.add_argument("--find", action="store_true")
    p.add_argument("--dedupe", action="store_true")
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    tb = make_toolbox(args.server, find=args.find, dedupe=args.dedupe)
    store = open_store(args.store)
    runtime = Runtime(tb, store, heartbeat_s=0.2, stale_after_s=1.0)
    try:
        if args.mode == "start":
            run = await runtime.start(Chain.from_yaml(CHAIN), {}, run_id=args.run_id)
        else:
            run = await runtime.resume(args.run_id, force=True)
        result = await run.wait()
        print(json.dumps({"status": str(result.status),
                          "steps": {k: str(v.status) for k, v in run.steps.items()}}),
              flush=True)
        return 0
    finally:
        await runtime.aclose()
        store.close()


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse(sys.argv[1:])))
