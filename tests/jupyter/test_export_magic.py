"""``%chain export-test`` (issue 31): the notebook's way to turn a run into a test."""

from __future__ import annotations

import json
import sys

import pytest

from .conftest import Harness

pytestmark = pytest.mark.anyio

MODULE = '''
from chainlab import Toolbox
tools = Toolbox("mod-shop")

@tools.tool
def fetch(n: int) -> list:
    return list(range(n))

@tools.tool(side_effects=True, requires_confirmation=True)
def send(items: list) -> str:
    return f"sent {len(items)}"
'''

CHAIN = '''%%chain modshop --tools tools
steps:
  - {id: get, tool: fetch, args: {n: 3}}
  - {id: out, tool: send, args: {items: "{{ steps.get.output }}"}}
'''


async def test_export_test_writes_the_test_and_its_fixture(sh: Harness, capsys) -> None:
    (sh.tmp_path / "mod_shop_tools.py").write_text(MODULE)
    try:
        await sh.ok("import sys; sys.path.insert(0, '.')\nfrom mod_shop_tools import tools")
        await sh.ok(CHAIN)
        await sh.ok("run = %chain run modshop\nawait run.wait()")
        await sh.ok("%chain approve run out")
        await sh.ok("await run.wait()")
        capsys.readouterr()
        await sh.ok("%chain export-test run -o tests/test_modshop.py")
        out = capsys.readouterr().out
        assert "wrote tests/test_modshop.py and test_modshop.replay.json (live: fetch)" in out
        text = (sh.tmp_path / "tests" / "test_modshop.py").read_text()
        assert "TOOLS = 'mod_shop_tools:tools'" in text and "LIVE = ['fetch']" in text
        fixture = json.loads((sh.tmp_path / "tests" / "test_modshop.replay.json").read_text())
        assert fixture["expected"]["confirmations"] == ["out"]
        assert fixture["decisions"][0]["action"] == "approve"
        await sh.ok("%chain export-test run -o tests/test_all.py --replay-all")
        assert "(live: none)" in capsys.readouterr().out
    finally:
        sys.modules.pop("mod_shop_tools", None)
        sys.path[:] = [p for p in sys.path if p != "."]


async def test_export_test_of_notebook_tools_says_how_to_fix_it(shop: Harness) -> None:
    await shop.ok("run = %chain run shop\nawait run.wait()")
    await shop.ok("%chain approve run out")
    await shop.ok("await run.wait()")
    message = await shop.usage_error("%chain export-test run -o tests/test_shop.py")
    assert "defined in this notebook, which a test cannot import" in message
    assert "--module MODULE:TOOLBOX" in message
    message = await shop.usage_error("%chain export-test run -o tests/shop.py --module x:tb")
    assert "name the test file test_NAME.py" in message
