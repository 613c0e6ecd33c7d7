"""No provider, no cost: ``import chainlab`` and a whole run import nothing of OpenTelemetry
when the application configured none (tests/test_layering.py checks ``import chainlab``
alone; the time a traced step costs is measured in benchmarks/bench_tracing.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

RUN = """
import json, sys
from chainlab import Chain, Runtime, Toolbox
from chainlab.store import MemoryStore
tb = Toolbox("t")
@tb.tool
def one(n: int) -> int:
    return n
chain = Chain.from_dict({"name": "c", "steps": [{"id": "a", "tool": "one", "args": {"n": 1}}]})
runtime = Runtime(tb, MemoryStore())
print(runtime.run_sync(chain).status, runtime.host.tracing)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
"""


def test_a_run_without_a_provider_imports_no_opentelemetry() -> None:
    proc = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    status, loaded = proc.stdout.splitlines()
    assert status == "succeeded None"
    assert json.loads(loaded) == []


def test_a_configured_global_provider_is_used_by_default() -> None:
    code = ("from opentelemetry import trace\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
            "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
            "InMemorySpanExporter\n"
            "exp = InMemorySpanExporter(); tp = TracerProvider()\n"
            "tp.add_span_processor(SimpleSpanProcessor(exp)); trace.set_tracer_provider(tp)\n"
            + RUN.replace("print(json.dumps", "print([s.name for s in "
                          "exp.get_finished_spans()])\n#"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    status, names = proc.stdout.splitlines()[:2]
    assert status.startswith("succeeded <chainlab.tracing.tracer.Tracing")
    assert names == "['step a', 'run c']"


def test_without_a_provider_no_code_of_chainlab_tracing_runs_per_step() -> None:
    """Counted, not timed: a run of 50 steps without a provider calls into chainlab.tracing
    once (the new run's meta checked for a parent), whatever its number of steps."""
    import anyio

    from chainlab import Chain, Toolbox
    from chainlab.runtime import Runtime
    from chainlab.store import MemoryStore

    tb = Toolbox("t")

    @tb.tool
    def one(n: int) -> int:
        return n

    steps = [{"id": f"s{i}", "tool": "one", "args": {"n": i}} for i in range(50)]
    chain = Chain.from_dict({"name": "c", "steps": steps})
    runtime = Runtime(tb, MemoryStore())
    calls: list[str] = []

    def profile(frame: object, event: str, arg: object) -> None:
        code = frame.f_code  # type: ignore[attr-defined]
        if event == "call" and "chainlab/tracing/" in code.co_filename:
            calls.append(code.co_name)

    async def go() -> None:
        sys.setprofile(profile)
        try:
            await (await runtime.start(chain)).wait()
        finally:
            sys.setprofile(None)
        await runtime.aclose()

    anyio.run(go)
    assert calls == ["kept_parent"]
