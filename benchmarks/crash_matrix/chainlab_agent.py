"""The support agent as a chainlab agent step, and its driver: natively (``chainlab.Agent``)
or converted from the Pydantic AI / OpenAI Agents SDK agent of ``pydantic_ai_agent.py`` /
``openai_agents_agent.py`` (the same objects, by ``from_pydantic_ai`` /
``from_openai_agents``, issue 45 items 1-2).

    python chainlab_agent.py start|resume|timing [--converted pydantic-ai|openai-agents]

The run lives in a ``SQLiteStore`` in ``CRASH_STATE``. ``resume`` in a new process is the
documented way (docs/concepts/durability.md): ``runtime.resume(run_id, force=True)`` takes
the run over from the log; a call waiting for approval still waits (the harness decides
it: ``run.approve`` / ``run.reject``), an unsafe call that was in flight is ``in_doubt``
for a person (the harness resolves it with the effect it finds in the ledger:
``run.resolve(step_id, output=...)``). A turn limit is the step's ``max_turns``: crossing
it makes the step wait for a person (``limit``), whom the harness tells to stop.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

from chainlab import Agent, Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore

RUN_ID = "support-run"
#: what the converters are told of the tools the SDKs cannot describe: the lookup and
#: the ping only read (the refund is left undescribed: side-effecting, not idempotent)
READ_ONLY = {"lookup_order": {"side_effects": False, "idempotent": True},
             "ping": {"side_effects": False, "idempotent": True}}


def toolbox(base_url: str, converted: str | None) -> Toolbox:
    """The support agent registered as ``agent:support``."""
    tb = Toolbox("support")
    if converted == "pydantic-ai":
        import pydantic_ai_agent

        from chainlab.integrations.pydantic_ai import from_pydantic_ai

        tb.add_agent(from_pydantic_ai(pydantic_ai_agent.build_agent(base_url),
                                      name="support", tools=READ_ONLY))
    elif converted == "openai-agents":
        import openai_agents_agent

        from chainlab.integrations.openai_agents import from_openai_agents

        tb.add_agent(from_openai_agents(openai_agents_agent.build_agent(base_url),
                                        name="support", tools=READ_ONLY))
    else:
        tb.tool(common.lookup_order)
        tb.tool(side_effects=True, requires_confirmation=True)(common.refund)
        tb.tool(common.ping)
        tb.add_agent(Agent("support", common.INSTRUCTIONS, ["lookup_order", "refund", "ping"],
                           model=common.MODEL, base_url=base_url, api_key="test"))
    return tb


def chain(request: str, max_turns: int) -> Chain:
    return Chain.from_dict({"name": "support", "steps": [
        {"id": "support", "tool": "agent:support",
         "args": {"request": request, "max_turns": max_turns}}]})


class Driver:
    def __init__(self, converted: str | None) -> None:
        self.runtime = Runtime(toolbox(common.base_url(), converted),
                               SQLiteStore(common.state_path("chainlab.db")))
        self.run: Any = None

    def _pending(self) -> list[dict[str, Any]]:
        state = self.run.state
        # the tool as the model named it (a converted agent's tool is support.refund in the
        # toolbox, refund to its model and to the harness)
        tools = {c["step_id"]: c["function"] for turn in self.run.transcript("support")
                 for c in turn.get("calls", ()) if c.get("step_id")}
        out = []
        for step_id, why in self.run.waiting().items():
            st = state.steps[step_id]
            kind = ("in_doubt" if why == "in_doubt" else
                    "limit" if st.reason in ("limit_reached", "budget_exceeded") else "approval")
            out.append({"id": step_id, "tool": tools.get(step_id, "agent:support"),
                        "args": st.args, "kind": kind})
        return out

    async def _settle(self) -> common.Outcome:
        """Report a call waiting as soon as it waits (its siblings may still run), else
        the run's end."""
        while True:
            pending = self._pending()
            if pending:
                return common.Outcome(waiting=pending)
            with anyio.move_on_after(0.01):
                result = await self.run.wait()
                if not self._pending():
                    errors = "; ".join(f"{k}: {v}" for k, v in result.errors.items())
                    return common.Outcome(status=str(result.status),
                                          output=result.outputs.get("support"),
                                          error=errors or None)

    async def start(self) -> common.Outcome:
        self.run = await self.runtime.start(
            chain(common.REQUEST, common.env_int("CRASH_MAX_TURNS", 10)), run_id=RUN_ID)
        return await self._settle()

    async def resume(self) -> common.Outcome:
        self.run = await self.runtime.resume(RUN_ID, force=True)
        return await self._settle()

    async def decide(self, decisions: list[dict[str, Any]]) -> common.Outcome:
        for d in decisions:
            if "resolve" in d:
                await self.run.resolve(d["id"], output=d["resolve"], note="found in the ledger")
            elif d.get("approve"):
                await self.run.approve(d["id"])
            else:
                await self.run.reject(d["id"], d["reject"])
        return await self._settle()


def main() -> None:
    args = sys.argv[1:]
    converted = args[args.index("--converted") + 1] if "--converted" in args else None
    common.versions("chainlab", "openai", *{"pydantic-ai": ["pydantic-ai-slim"],
                                            "openai-agents": ["openai-agents"]}.get(
                                                converted or "", []))
    if args[0] == "timing":
        store = os.environ.get("CRASH_STORE", "memory")
        runtime = Runtime(toolbox(common.base_url(), converted),
                          MemoryStore() if store == "memory" else
                          SQLiteStore(common.state_path("timing.db")))

        async def run_once(turns: int, calls: int, rep: int) -> None:
            run = await runtime.start(chain(common.timing_request(turns, calls, rep), turns + 2))
            result = await run.wait()
            assert result.ok and result.outputs["support"] == "done", result

        anyio.run(common.timing, run_once)
    else:
        driver = Driver(converted)
        anyio.run(common.serve, driver, args[0])


if __name__ == "__main__":
    main()
