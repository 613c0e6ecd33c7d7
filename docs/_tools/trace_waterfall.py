"""The picture of docs/concepts/observability.md: one run's trace as a trace viewer shows it
(a waterfall), drawn with matplotlib from the spans the OpenTelemetry SDK exported (no
external viewer is needed, or available offline).

    .venv/bin/python docs/_tools/trace_waterfall.py [OUT.png]

The run: an order is looked up, an agent (over the scripted OpenAI-compatible server of
chainlab.testing) looks the order up and labels it, then a refund waits for a person, who
approves it; the run ends. Spans are exported to the SDK's in-memory exporter, then drawn:
one row per span, indented under its parent, in start order; the root's span events (the
decision, who made it) as marks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from chainlab import Agent, Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

OUT = Path(__file__).resolve().parents[1] / "concepts" / "observability-trace.png"
COLOURS = {"run": "#4c566a", "step": "#5e81ac", "invoke_agent": "#b48ead", "chat": "#d08770",
           "execute_tool": "#a3be8c", "compensate": "#bf616a"}


def toolbox(server: FakeOpenAI) -> Toolbox:
    tb = Toolbox("shop")

    @tb.tool
    async def lookup(order: int) -> dict[str, Any]:
        """Find an order."""
        await anyio.sleep(0.03)
        return {"order": order, "status": "delivered", "total": 40}

    @tb.tool(side_effects=True, idempotent=True)
    async def label(order: int, text: str) -> str:
        """Label an order."""
        await anyio.sleep(0.02)
        return f"labelled {order}"

    @tb.tool(side_effects=True, requires_confirmation=True, idempotent=True)
    async def refund(order: int, amount: int) -> dict[str, Any]:
        """Refund an order (a person approves)."""
        await anyio.sleep(0.04)
        return {"order": order, "refunded": amount}

    tb.add_agent(Agent("support", "You help customers with their orders.",
                       ["lookup", "label"], model="gpt-4o-mini", base_url=server.base_url,
                       api_key="test"))
    return tb


CHAIN = Chain.from_dict({"name": "refund_order", "steps": [
    {"id": "order", "tool": "lookup", "args": {"order": 7}},
    {"id": "triage", "tool": "agent:support", "depends_on": ["order"],
     "args": {"request": "order 7 arrived broken: check it and label it"}},
    {"id": "refund", "tool": "refund", "depends_on": ["triage"],
     "args": {"order": 7, "amount": 15}}]})


async def traced_run() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with FakeOpenAI() as server:
        server.add(tool_calls(Call("lookup", {"order": 7}, "call_1"),
                              Call("label", {"order": 7, "text": "damaged"}, "call_2")),
                   "Order 7 is delivered and labelled damaged.")
        runtime = Runtime(toolbox(server), MemoryStore(), tracer_provider=provider)
        run = await runtime.start(CHAIN)
        await run.wait()  # the refund waits for a person
        await anyio.sleep(0.05)
        await run.approve("refund", by="ana@shop")
        await run.wait()
        await runtime.aclose()
    provider.shutdown()
    return list(exporter.get_finished_spans())


def ordered(spans: list[ReadableSpan]) -> list[tuple[ReadableSpan, int]]:
    """(span, depth), each span under its parent, children in start order."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(s)
    out: list[tuple[ReadableSpan, int]] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            out.append((s, depth))
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return out


def draw(spans: list[ReadableSpan], out: Path) -> None:
    rows = ordered(spans)
    t0 = min(s.start_time or 0 for s in spans)
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.2))
    for y, (s, depth) in enumerate(rows):
        start = ((s.start_time or 0) - t0) / 1e6
        width = max(((s.end_time or 0) - (s.start_time or 0)) / 1e6, 0.4)
        kind = s.name.split(" ")[0]
        colour = COLOURS.get(kind, "#88c0d0")
        ax.barh(y, width, left=start, height=0.6, color=colour,
                edgecolor="#bf616a" if s.status.status_code.name == "ERROR" else colour)
        ax.text(-0.42 + 0.025 * depth, y, s.name, ha="left", va="center", fontsize=9,
                family="monospace", transform=ax.get_yaxis_transform())
        ax.text(start + width + 2, y, f"{width:.0f} ms", va="center", fontsize=8,
                color="#4c566a")
        for ev in s.events:
            x = ((ev.timestamp or 0) - t0) / 1e6
            ax.plot(x, y, marker="D", color="#ebcb8b", markeredgecolor="#4c566a", ms=7)
            who = (ev.attributes or {}).get("chainlab.decision.by", "")
            ax.annotate(f"{ev.name.removeprefix('chainlab.')} {who}".strip(), (x, y),
                        xytext=(0, -13), textcoords="offset points", ha="center",
                        fontsize=7.5, color="#4c566a")
    trace_id = f"{spans[0].context.trace_id:032x}"
    ax.set_title(f"one run, one trace ({trace_id[:16]}...): {len(spans)} spans in the "
                 "GenAI conventions", fontsize=10, loc="left")
    ax.set_yticks([])
    ax.set_ylim(len(rows) - 0.4, -0.8)
    ax.set_xlabel("ms since the run started")
    ax.spines[["top", "right", "left"]].set_visible(False)
    fig.subplots_adjust(left=0.32, right=0.97)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"{out}: {len(spans)} spans")


if __name__ == "__main__":
    draw(anyio.run(traced_run), Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
