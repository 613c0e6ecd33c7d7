"""What a bare ``chain`` or ``run`` shows in Jupyter (``_repr_mimebundle_``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from chainlab import Chain
from chainlab.render import chain_mimebundle, node_styles, run_mimebundle
from chainlab.render import svg as svg_module

from .conftest import demo_chain, demo_toolbox, needs_backend
from .scenarios import Lab, run_saga

pytestmark = pytest.mark.anyio


def _any_backend() -> None:
    from chainlab.render import available_backends

    if not available_backends():
        pytest.skip("no Graphviz backend here (apt-get install graphviz, or "
                    'pip install "chainlab[jupyter]")')


async def test_chain_shows_its_dag() -> None:
    _any_backend()
    chain = Chain.from_dict({"name": "plainly", "steps": [
        {"id": "a", "tool": "unregistered_tool_x"},
        {"id": "b", "tool": "unregistered_tool_x", "depends_on": ["a"]}]})
    bundle = chain._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/plain"}
    assert bundle["text/plain"] == "<Chain 'plainly': 2 steps (a, b)>"
    ET.fromstring(bundle["image/svg+xml"])
    assert bundle == chain._repr_mimebundle_()  # deterministic, byte for byte


async def test_chain_bundle_with_toolbox_and_problems() -> None:
    _any_backend()
    tb = demo_toolbox()
    broken = Chain.from_dict({"name": "b", "steps": [{"id": "x", "tool": "nope"}]})
    bundle = chain_mimebundle(broken, tb, problems=broken.problems(tb))
    assert "⚠ unknown_tool" in bundle["image/svg+xml"]
    assert "⚠ plan problem" in bundle["image/svg+xml"]  # and the legend explains it
    assert "notify" in chain_mimebundle(demo_chain(), tb)["image/svg+xml"]


async def test_run_shows_its_statuses_and_no_run_id_in_the_picture() -> None:
    _any_backend()
    lab = Lab()
    first = await run_saga(lab)
    second = await run_saga(lab)
    a, b = first._repr_mimebundle_(), run_mimebundle(second)
    assert a["text/plain"].startswith("<Run run-1 'saga' rolled_back>")
    assert "2 compensated, 1 failed" in a["text/plain"]
    assert a["image/svg+xml"] == b["image/svg+xml"]  # same state, same bytes (nbval)
    assert "run-1" not in a["image/svg+xml"] and "saga · run rolled_back" in a["image/svg+xml"]
    lines = {eid.rsplit("-n-", 1)[1]: s.lines[-1]
             for eid, s in node_styles(a["image/svg+xml"]).items()}
    assert lines == {"charge": "↩ compensated", "pay": "↩ compensated · approved",
                     "ship": "✗ failed"}


async def test_read_only_run_from_the_store_draws_the_same() -> None:
    _any_backend()
    lab = Lab()
    run = await run_saga(lab)
    from chainlab.runtime import Runtime

    other = Runtime(lab.toolbox, lab.store).get_run(run.run_id)  # not driven here
    assert other.active is False
    assert run_mimebundle(other)["image/svg+xml"] == run_mimebundle(run)["image/svg+xml"]


async def test_graphviz_error_degrades_to_text(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_backend("dot")

    def boom(dot: str) -> str:
        raise svg_module.GraphvizError("dot crashed", backend="dot")

    monkeypatch.setattr(svg_module, "_run_dot", boom)
    monkeypatch.setenv("CHAINLAB_GRAPHVIZ", "dot")
    monkeypatch.setenv("CHAINLAB_LAYOUT_CACHE", "off")  # (a layout kept on disk answers)
    svg_module._cache.clear()
    bundle = chain_mimebundle(demo_chain(), demo_toolbox())
    assert set(bundle) == {"text/plain"} and "not drawn: dot crashed" in bundle["text/plain"]
