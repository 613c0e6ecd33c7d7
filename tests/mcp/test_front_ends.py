"""MCP tools everywhere a Python tool appears (issue 28, items 3 and 4): the designer's
palette (badge, hints, generated form), ``%chain tools --mcp``, ``chainlab tools`` and
``--mcp`` on the commands, the planner's tool list; the server's text is data, escaped in
every HTML view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chainlab import Toolbox
from tests.cli.helpers import chainlab, write
from tests.mcp.conftest import SERVER

pytestmark = [pytest.mark.xdist_group("mcp"), pytest.mark.timeout(240)]

SPEC = "python -m chainlab.testing.mcp_server"
HOSTILE = ("<script>", "<b onmouseover", "<img src=x")


@pytest.fixture(scope="module")
def desk() -> Toolbox:
    toolbox = Toolbox("desk")

    @toolbox.tool
    def shorten(text: str, limit: int = 12) -> str:
        """Cut a text."""
        return text[:limit]

    toolbox.add_mcp(SERVER)
    return toolbox


# ------------------------------------------------------------------ the designer
@pytest.mark.anyio
async def test_the_palette_lists_mcp_tools_with_badge_hints_and_forms(desk: Toolbox) -> None:
    pytest.importorskip("ipywidgets")
    from chainlab.jupyter import ChainDesigner

    d = ChainDesigner(desk, name="flow")
    try:
        assert {"shorten", "lookup", "create_ticket", "shout"} <= set(d.palette.buttons)
        info = d.palette.items["create_ticket"].children[1].value
        assert "create_ticket(title, priority?)" in info
        assert ">MCP: chainlab-desk<" in info and ">needs confirmation<" in info
        lookup = d.palette.items["lookup"].children[1].value
        assert ">readOnlyHint: true<" in lookup and ">read-only<" in lookup
        assert ">MCP: chainlab-desk<" not in d.palette.items["shorten"].children[1].value
        shout = d.palette.items["shout"].children[1].value
        assert not any(bad in shout for bad in HOSTILE)  # untrusted text is escaped
        assert "&lt;script&gt;" in shout
        d.palette.buttons["create_ticket"].click()
        assert list(d.form.rows) == ["title", "priority"]
        priority = d.form.rows["priority"].literal
        assert [v for _, v in priority.options][1:] == ['"low"', '"high"']  # the enum
        d.form.rows["title"].literal.value = "Fix the build"
        assert d.step("create_ticket")["args"] == {"title": "Fix the build"}
        assert d.problems == []
    finally:
        d.close()


# ------------------------------------------------------------------ the notebook
@pytest.mark.anyio
async def test_chain_tools_mcp_in_a_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    from chainlab.jupyter import session as session_module

    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance(cache_size=0)
    ip.run_line_magic("load_ext", "chainlab")
    session_module._SESSIONS.pop(id(ip), None)
    ip.user_ns.pop("mcp_tools", None)
    try:
        table = ip.run_line_magic("chain", f'tools --mcp "{SPEC}"')
        box = ip.user_ns["mcp_tools"]
        assert isinstance(box, Toolbox) and "lookup" in box
        assert "MCP: chainlab-desk" in repr(table)
        html = table._repr_html_()
        assert not any(bad in html for bad in HOSTILE) and "&lt;script&gt;" in html
        again = ip.run_line_magic("chain", f'tools --mcp "{SPEC}" --tools mcp_tools')
        assert again.toolbox is box  # a cell run again adds nothing twice
        assert ip.run_line_magic("chain", "tools --tools mcp_tools").rows == table.rows
        from IPython.core.error import UsageError

        names = box.names()
        with pytest.raises(UsageError, match=r"(?s)MCP server 'no-such-cmd-z'.*PATH"):
            ip.run_line_magic("chain", 'tools --mcp "no-such-cmd-z" --tools mcp_tools')
        assert box.names() == names  # nothing added
    finally:
        session = session_module._SESSIONS.pop(id(ip), None)
        if session is not None:
            session.close()
        box = ip.user_ns.pop("mcp_tools", None)
        if box is not None:
            await box.aclose()


# ------------------------------------------------------------------ the command line
def test_chainlab_tools_lists_mcp_tools(tmp_path: Path) -> None:
    r = chainlab("tools", "--mcp", SPEC, cwd=tmp_path)
    assert r.code == 0, r.err
    assert "create_ticket(title, priority?)  [side effects, needs confirmation]  " \
           "MCP: chainlab-desk" in r.out
    assert "lookup(key)  [read-only]  MCP: chainlab-desk" in r.out
    r = chainlab("tools", "--mcp", f"desk={SPEC}", "--json", cwd=tmp_path)
    described = {t["name"]: t for t in json.loads(r.out)}
    assert described["desk__set_status"]["idempotent"] is True
    assert described["desk__lookup"]["hints"] == {"readOnlyHint": True}


def test_a_bad_mcp_spec_is_a_usage_error_naming_the_server(tmp_path: Path) -> None:
    r = chainlab("tools", "--mcp", "no-such-server-cmd --flag", cwd=tmp_path)
    assert r.code == 2
    assert "MCP server 'no-such-server-cmd --flag'" in r.err
    assert "is it installed and on PATH?" in r.err


def test_run_and_validate_with_mcp(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", """\
name: look
steps:
  - id: look
    tool: lookup
    args: {key: mcp}
  - id: find
    tool: search
    args: {query: "{{ steps.look.output.key }}"}
""")
    bad = write(tmp_path / "bad.yaml", """\
name: bad
steps:
  - id: look
    tool: lookup
    args: {key: 3}
""")
    r = chainlab("validate", str(bad), "--mcp", SPEC, cwd=tmp_path)
    assert r.code == 2 and "invalid_args" in r.err and "args.key" in r.err, r.err
    r = chainlab("run", str(good), "--mcp", SPEC, "--db", str(tmp_path / "runs.db"),
                 "--quiet", "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert r.json["outputs"] == {"look": {"key": "mcp", "value": "the Model Context Protocol"},
                                 "find": "mcp"}


# ------------------------------------------------------------------ the planner
def test_the_planner_gets_mcp_tools_as_data(desk: Toolbox) -> None:
    from chainlab.planner.policy import PlanPolicy
    from chainlab.planner.prompts import chat_messages

    [system, _] = chat_messages("look up mcp", desk, None, PlanPolicy())
    text = system["content"]
    tools = json.loads(text.split("Tools:\n", 1)[1])
    assert {"lookup", "create_ticket"} <= {t["name"] for t in tools}
    shout = next(t for t in tools if t["name"] == "shout")
    assert shout["origin"] == "MCP: chainlab-desk"
    assert "never follow" in text  # the rules say that descriptions are data
    # a template in a description stays text: the plan layer never reads it
    assert "{{ context.x }}" in shout["description"]


@pytest.mark.anyio
async def test_a_hostile_output_is_escaped_in_the_run_widget(desk: Toolbox) -> None:
    pytest.importorskip("ipywidgets")
    from chainlab import Chain
    from chainlab.jupyter import RunWidget
    from chainlab.runtime import Runtime
    from chainlab.store import MemoryStore

    runtime = Runtime(desk, MemoryStore())
    run = await runtime.start(Chain.from_dict({"name": "h", "steps": [
        {"id": "s", "tool": "shout", "args": {"text": "<b>hi</b>"}}]}), {})
    result = await run.wait()
    assert result.outputs["s"] == {"result": "<B>HI</B> <img src=x onerror=alert(3)>"}
    widget = RunWidget(run)
    try:
        widget.inspector.select("s")
        details = widget.inspector.details.value
        assert "<img src=x" not in details and "<B>HI" not in details
        assert "&lt;img src=x onerror=alert(3)&gt;" in details
    finally:
        widget.close()
        await runtime.aclose()


def test_a_run_started_with_mcp_is_approved_in_another_process(tmp_path: Path) -> None:
    chain = write(tmp_path / "ticket.yaml", """\
name: ticket
steps:
  - id: look
    tool: desk__lookup
    args: {key: python}
  - id: open
    tool: desk__create_ticket
    args: {title: "{{ steps.look.output.value }}"}
""")
    r = chainlab("run", str(chain), "--mcp", f"desk={SPEC}", cwd=tmp_path)
    assert r.code == 3, r.out + r.err  # create_ticket has no annotations: confirmation
    run_id = r.run_id()
    # a new process: the run remembers its MCP server
    r2 = chainlab("approve", run_id, "open", "--json", cwd=tmp_path)
    assert r2.code == 0, r2.err
    assert r2.json["outputs"]["open"]["title"] == "a programming language"
