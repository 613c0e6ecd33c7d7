"""Safety regressions of the chain designer (issue 25, defects 12, 13, 16 and 17): every
YAML entry point refuses aliases, a value that cannot be written as plan YAML is refused
with a chainlab error and is not kept, malformed step ids and tools are refused clearly."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from chainlab import Toolbox
from chainlab.errors import ChainlabError
from chainlab.jupyter import ChainDesigner
from chainlab.jupyter.designer import DesignerError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def toolbox() -> Toolbox:
    tb = Toolbox("dsg-safety")

    @tb.tool
    def fetch(n: int) -> list[int]:
        return list(range(n))

    @tb.tool
    def echo(value: object = None) -> object:
        return value

    return tb


@pytest.fixture
async def designer() -> AsyncIterator[ChainDesigner]:
    d = ChainDesigner(toolbox(), name="safe")
    d.add_step("fetch", "a", args={"n": 1})
    yield d
    d.close()


def alias_bomb(levels: int = 9) -> str:
    lines = ["name: bomb", "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"x{i}: &a{i} [{refs}]")
    lines.append("steps: []")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ defect 12
async def test_an_alias_bomb_typed_into_the_yaml_tab_is_refused_at_once(
        designer: ChainDesigner) -> None:
    t0 = time.perf_counter()
    designer.yaml = alias_bomb()
    took = time.perf_counter() - t0
    assert [p.code for p in designer.problems] == ["bad_syntax"]
    assert "alias" in designer.problems[0].message
    assert designer.chain is None
    assert took < 5, took  # expanding 387 million values would take minutes or exhaust memory
    # the draft's data is not the expanded graph; the designer keeps working
    designer.yaml = "name: ok\nsteps: []\n"
    assert designer.problems == []


async def test_the_json_box_of_an_argument_refuses_aliases_too() -> None:
    from chainlab.jupyter.designer.args import from_text

    value = from_text("&a [1, *a]", "json")
    assert value == "&a [1, *a]"  # kept as the text typed; validation says it does not fit


# ------------------------------------------------------------------ defects 13 and 16
@pytest.mark.parametrize("make", [
    lambda: 10 ** 5000,
    lambda: object(),
    lambda: (lambda x: (x.append(x), x)[1])([]),
], ids=["huge-int", "object", "self-containing-list"])
async def test_a_value_yaml_cannot_hold_is_refused_and_not_kept(designer: ChainDesigner,
                                                                 make: object) -> None:
    before_yaml, before_step = designer.yaml, designer.step("a")
    value = make()  # type: ignore[operator]
    with pytest.raises(DesignerError) as info:
        designer.set_arg("a", "n", value)
    assert isinstance(info.value, ChainlabError)
    assert "args.n" in str(info.value)
    with pytest.raises(DesignerError):
        designer.update_step("a", args={"n": value})
    assert designer.yaml == before_yaml
    assert designer.step("a") == before_step
    # later edits keep working
    designer.set_arg("a", "n", 4)
    assert designer.step("a")["args"] == {"n": 4}
    assert designer.problems == []


async def test_add_step_with_an_unwritable_arg_is_refused(designer: ChainDesigner) -> None:
    with pytest.raises(DesignerError):
        designer.add_step("echo", "b", args={"value": 7 * 10 ** 4400})
    assert designer.step_ids == ["a"]


# ------------------------------------------------------------------ defect 17
@pytest.mark.parametrize("bad", ["b\n", "b\r\n", "\nb", "b c", ""])
async def test_malformed_step_ids_are_refused(designer: ChainDesigner, bad: str) -> None:
    with pytest.raises(DesignerError, match="step id"):
        designer.add_step("fetch", bad)
    with pytest.raises(DesignerError, match="step id"):
        designer.rename_step("a", bad)
    assert designer.step_ids == ["a"]


@pytest.mark.parametrize("tool", [None, 3, ""])
async def test_add_step_without_a_tool_name_is_a_clear_error(designer: ChainDesigner,
                                                             tool: object) -> None:
    with pytest.raises(DesignerError, match="tool"):
        designer.add_step(tool)  # type: ignore[arg-type]
    assert designer.step_ids == ["a"]
