"""Every ``%chain`` subcommand and every usage error, through a real InteractiveShell."""

from __future__ import annotations

import pytest

from chainlab.runtime import Run, RunStatus

from .conftest import Harness

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------------- %%chain
async def test_define_binds_the_chain_and_draws_it(shop: Harness) -> None:
    await shop.ok(TRIP_AGAIN)
    assert shop.ns["trip2"].step_ids == ["flight", "hotel"]
    text, = shop.displayed()
    assert text.splitlines()[0] == "chain 'trip2' (toolbox 'shop'): 2 steps, valid"
    assert "hotel          book  <- flight" in text


TRIP_AGAIN = '''%%chain trip2 --tools tb
steps:
  - {id: flight, tool: book, args: {what: flight}}
  - {id: hotel, tool: book, args: {what: "{{ steps.flight.output }}"}}
'''


async def test_define_lists_problems_and_still_binds(shop: Harness) -> None:
    await shop.ok('''%%chain bad --tools tb
steps:
  - {id: get, tool: fetc, args: {n: 3}}
  - {id: out, tool: send, args: {items: "{{ steps.gt.output }}"}}
''')
    assert shop.ns["bad"].name == "bad"
    text, = shop.displayed()
    assert "2 steps, 2 problems" in text
    # line numbers are the cell's own (the %%chain line is line 1)
    assert ("[unknown_tool] line 3, step 'get', tool: unknown tool 'fetc'; did you mean "
            "'fetch'?") in text
    assert "[unknown_reference] line 4, step 'out'" in text
    assert "no step 'gt'; did you mean 'get'?" in text
    msg = await shop.usage_error("%chain run bad --tools tb")
    assert msg.startswith("cannot start: chain 'bad' has 2 problems")


async def test_define_html_has_problems_and_dag(shop: Harness) -> None:
    await shop.ok("%%chain c --tools tb\nsteps:\n  - {id: a, tool: fech}\n")
    html, = shop.displayed("text/html")
    assert '<ul class="cl-problems">' in html and "did you mean &#x27;fetch&#x27;" in html
    assert "<svg" in html or "DAG not drawn" in html


async def test_define_yaml_name_wins_and_structure_only_without_tools(sh: Harness) -> None:
    await sh.ok("%%chain var\nname: real-name\nsteps:\n  - {id: a, tool: anything}\n")
    assert sh.ns["var"].name == "real-name"
    text, = sh.displayed()
    assert "note: no tools" in text and "checked the structure only" in text


@pytest.mark.parametrize(("cell", "expected"), [
    ("%%chain c\nsteps: [\n", "bad_syntax"),
    ("%%chain c\nsteps:\n  - {id: a, tol: x}\n", "line 3"),
    ("%%chain c\n\n", "the cell body is empty"),
    ("%%chain 1c\nsteps: []\n", "must be a Python identifier"),
    ("%%chain c --tols tb\nsteps: []\n", "unknown option '--tols'; did you mean '--tools'?"),
    ("%%chain\nsteps: []\n", "the following arguments are required: NAME"),
    ("%%chain c --tools nope\nsteps: []\n", "no variable 'nope'"),
])
async def test_define_usage_errors(shop: Harness, cell: str, expected: str) -> None:
    assert expected in await shop.usage_error(cell)


# ---------------------------------------------------------------------- toolboxes
async def test_tools_lists_the_contract(shop: Harness) -> None:
    text = repr(await shop.ok("%chain tools --tools tb"))
    assert text.splitlines()[0] == "toolbox 'shop': 5 tools"
    assert "send    (items)  side effects, confirm, undo: unsend" in text
    assert "fetch   (n)  read-only  - Fetch n items." in text


async def test_only_toolbox_in_the_namespace_is_used(shop: Harness) -> None:
    assert "toolbox 'shop'" in repr(await shop.ok("%chain tools"))


async def test_default_toolbox_wins_and_says_so(shop: Harness, capsys) -> None:
    await shop.ok("@chainlab.tool\ndef hello(name: str) -> str:\n    return name\n")
    capsys.readouterr()
    table = await shop.ok("%chain tools")
    assert "toolbox 'default'" in repr(table)
    note = capsys.readouterr().out
    assert "using the default toolbox (@chainlab.tool: hello); also in the notebook: tb" in note
    assert "pass --tools tb" in note


async def test_toolbox_errors(sh: Harness) -> None:
    assert "no tools: register some with @chainlab.tool" in await sh.usage_error("%chain tools")
    await sh.ok("from chainlab import Toolbox\na = Toolbox('a'); b = Toolbox('b'); x = 3")
    assert "several toolboxes in the notebook (a, b)" in await sh.usage_error("%chain tools")
    assert "'x' is a int, not a chainlab.Toolbox" in await sh.usage_error("%chain tools --tools x")
    assert "no variable 'c'" in await sh.usage_error("%chain tools --tools c")


# ---------------------------------------------------------------------- run
async def test_run_returns_the_run_and_shows_its_widget(shop: Harness) -> None:
    await shop.ok("run = %chain run shop --db runs.db")
    run = shop.ns["run"]
    assert isinstance(run, Run) and run.active
    shown, = shop.displayed()
    assert shown == f"RunWidget(run {run.run_id}, chain 'shop')"
    result = await shop.ok("r = await run.wait()\nr")
    assert result.status == RunStatus.SUSPENDED and result.waiting == {
        "out": "waiting_confirmation"}
    assert (shop.tmp_path / "runs.db").exists()


async def test_run_displays_as_widget_when_shown(shop: Harness) -> None:
    await shop.ok("run = %chain run trip")
    shop.displayed()
    await shop.ok("x = 1")  # a later cell (a kernel gives each cell its execution count)
    data, _ = shop.ip.display_formatter.format(shop.ns["run"])  # what Out[] / display() use
    assert data == {}  # the widget displayed itself, with a display id (issue 18)
    out, picture = shop.pub.outputs  # the widget view, then its static picture (issue 29)
    assert "application/vnd.jupyter.widget-view+json" in out["data"]
    assert out["data"]["text/plain"].startswith("RunWidget(run ")
    assert 'class="cl-static-run"' in picture["data"]["text/html"]
    assert picture["transient"]["display_id"].startswith("chainlab-run-")


async def test_a_bare_run_magic_shows_its_widget_once(shop: Harness) -> None:
    """`%chain run NAME` unassigned: the magic shows the widget, and IPython's display of the
    Run it returns does not show it a second time in the same cell."""
    await shop.ok("%chain run trip")
    shown = shop.displayed()
    assert len(shown) == 1 and shown[0].startswith("RunWidget(run ")


async def test_run_options(shop: Harness) -> None:
    await shop.ok("ctx = {'x': 1}")
    await shop.ok("run = %chain run trip --context ctx --concurrency 1 --break hotel")
    run = shop.ns["run"]
    assert run.record.context == {"x": 1}
    assert run.record.options["max_concurrency"] == 1
    await shop.ok("import asyncio\nwhile not run.paused: await asyncio.sleep(0.01)")
    assert run.state.paused_at == "hotel"
    assert run.steps["flight"].status == "succeeded" and run.steps["hotel"].status == "ready"
    await shop.ok("run2 = %chain run trip --context '{\"x\": [1, 2]}' --step")
    run2 = shop.ns["run2"]
    assert run2.record.context == {"x": [1, 2]} and run2.paused


@pytest.mark.parametrize(("line", "expected"), [
    ("%chain run nope", "no chain 'nope' (known: shop, trip); define it with %%chain nope"),
    ("%chain run shp", "no chain 'shp'; did you mean 'shop'?"),
    ("%chain run tb", "'tb' is a Toolbox, not a chain"),
    ("%chain run shop --concurrency 0", "--concurrency must be 1 or more, got 0"),
    ("%chain run shop --concurrency two", "--concurrency: invalid int value: 'two'"),
    ("%chain run shop --break gt", "--break: chain 'shop' has no step 'gt'; did you mean 'get'?"),
    ("%chain run shop --context '{x: 1}'", "JSON wants double quotes"),
    ("%chain run shop --context '[1]'", "--context must be a JSON object or a dict, got list"),
    ("%chain run shop --context ctx", "--context ctx: no variable 'ctx'"),
    ("%chain run shop --cncurrency 3", "unknown option '--cncurrency'; did you mean "
                                       "'--concurrency'?"),
    ("%chain run", "the following arguments are required: NAME"),
    ("%chain run shop extra", "unexpected argument 'extra'"),
    ("%chain run 'shop", "close the quote"),
    ("%chain rn shop", "unknown subcommand 'rn'; did you mean 'run'?"),
    ("%chain fly", "unknown subcommand 'fly'; `%chain help` lists them"),
])
async def test_run_usage_errors(shop: Harness, line: str, expected: str) -> None:
    assert expected in await shop.usage_error(line)


async def test_run_reports_missing_context_as_a_plan_problem(shop: Harness) -> None:
    await shop.ok("%%chain ctxchain --tools tb\nsteps:\n  - {id: a, tool: fetch, "
                  "args: {n: '{{ context.n }}'}}\n")
    msg = await shop.usage_error("%chain run ctxchain --context '{\"m\": 1}'")
    assert msg.startswith("cannot start: chain 'ctxchain' has 1 problem") and "context.n" in msg


# ---------------------------------------------------------------------- control
async def test_approve_and_reject(shop: Harness, capsys) -> None:
    await shop.ok("run = %chain run shop\nawait run.wait()")
    run = shop.ns["run"]
    capsys.readouterr()
    await shop.ok("%chain approve run out --note 'looks fine'")
    assert capsys.readouterr().out == f"approved step 'out' of run {run.run_id}\n"
    assert run.steps["out"].approval["note"] == "looks fine"
    result = await shop.ok("await run.wait()")
    assert result.status == RunStatus.SUCCEEDED and result.outputs["out"] == "sent 3"

    await shop.ok("run2 = %chain run shop\nawait run2.wait()")
    run2 = shop.ns["run2"]
    await shop.ok(f"%chain reject {run2.run_id} out --reason 'not today'")
    result = await shop.ok("await run2.wait()")
    assert run2.steps["out"].status == "rejected" and run2.steps["out"].reason == "not today"
    assert result.status in (RunStatus.FAILED, RunStatus.ROLLED_BACK)


async def test_approve_with_edited_args(shop: Harness) -> None:
    await shop.ok("run = %chain run shop\nawait run.wait()")
    await shop.ok("%chain approve run out --args '{\"items\": [9]}'")
    result = await shop.ok("await run.wait()")
    assert result.outputs["out"] == "sent 1"
    assert shop.ns["run"].steps["out"].approval["edited"] is True


@pytest.mark.parametrize(("line", "expected"), [
    ("%chain approve run ot", "run has no step 'ot'; did you mean 'out'?"),
    ("%chain approve run get", "it is succeeded, not waiting_confirmation "
                               "(waiting_confirmation: out)"),
    ("%chain approve run out --args '{\"items\": 3}'", "args do not fit tool"),
    ("%chain approve run", "the following arguments are required: STEP"),
    ("%chain approve nosuchrun out", "no run 'nosuchrun'"),
    ("%chain reject run out", "the following arguments are required: --reason"),
    ("%chain reject run get --reason no", "cannot reject step 'get'"),
])
async def test_control_usage_errors(shop: Harness, line: str, expected: str) -> None:
    await shop.ok("run = %chain run shop\nawait run.wait()")
    assert expected in await shop.usage_error(line)


async def test_approve_a_finished_run_says_so(shop: Harness) -> None:
    await shop.ok(OTHER_PROCESS.format(chain="trip"))
    rid = shop.ns["rid"]
    msg = await shop.usage_error(f"%chain approve {rid} hotel --db shared.db")
    assert msg == f"run {rid} already ended (succeeded); nothing waits for a decision"


async def test_rollback_compensates_in_reverse_completion_order(shop: Harness) -> None:
    await shop.ok("run = %chain run trip\nawait run.wait()\ncalls.clear()")
    await shop.ok("%chain rollback run")
    await shop.settle()
    result = await shop.ok("await run.wait()")
    assert result.status == RunStatus.ROLLED_BACK
    assert shop.ns["calls"] == [("unbook", "ref-car"), ("unbook", "ref-hotel"),
                                ("unbook", "ref-flight")]
    assert "already rolled back" in await shop.usage_error("%chain rollback run")


OTHER_PROCESS = '''
# "another process": a separate runtime on the same file that stops driving the run
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
other = Runtime(tb, SQLiteStore("shared.db"))
first = await other.start({chain}, {{}})
await first.wait()
await other.aclose()
other.store.close()
rid = first.run_id
'''


async def test_resume_a_run_stored_by_another_process(shop: Harness, capsys) -> None:
    await shop.ok(OTHER_PROCESS.format(chain="shop"))
    rid = shop.ns["rid"]
    capsys.readouterr()
    await shop.ok(f"run = %chain resume {rid} --db shared.db")
    out = capsys.readouterr().out
    assert out.startswith(f"resumed run {rid} ('shop') in this kernel as epoch 2")
    assert out.rstrip().endswith("as epoch 2; it was suspended")
    run = shop.ns["run"]
    assert run.active and run.state.epoch == 2
    widget = shop.session.widgets[rid]
    assert "step_waiting_confirmation out" in widget.event_log.value  # stored history
    await shop.ok(f"%chain approve {rid} out")
    result = await shop.ok("await run.wait()")
    assert result.status == RunStatus.SUCCEEDED
    await shop.ok(f"%chain resume {rid}")
    assert "already driven by this kernel" in capsys.readouterr().out


async def test_resume_errors(shop: Harness) -> None:
    assert "no run 'x1'" in await shop.usage_error("%chain resume x1")
    await shop.ok("run = %chain run trip --db a.db\nawait run.wait()")
    rid = shop.ns["run"].run_id
    assert f"no run {rid[:-1]!r} in " in await shop.usage_error(
        f"%chain resume {rid[:-1]} --db a.db")
    assert f"did you mean {rid!r}" in await shop.usage_error(f"%chain resume {rid[:-1]} --db a.db")


# ---------------------------------------------------------------------- inspection
async def test_runs_show_timeline(shop: Harness) -> None:
    await shop.ok("run = %chain run trip --db r.db\nawait run.wait()")
    rid = shop.ns["run"].run_id
    table = await shop.ok("%chain runs --db r.db")
    lines = repr(table).splitlines()
    assert lines[0] == "1 run in r.db"
    assert lines[1].split()[:4] == [rid, "trip", "succeeded", "epoch"]
    assert "<table" in table._repr_html_()
    shop.displayed()
    await shop.ok("%chain show trip")
    assert shop.displayed()[0].startswith("chain 'trip' (toolbox 'shop'): 3 steps, valid")
    await shop.ok(f"%chain show {rid}")
    assert shop.displayed() == [f"RunWidget(run {rid}, chain 'trip')"]
    assert "no chain 'nothing'" in await shop.usage_error("%chain show nothing")
    assert "--limit must be 1 or more" in await shop.usage_error("%chain runs --limit 0")
    await shop.ok(f"%chain timeline {rid}")
    shown = shop.displayed()
    # issue 29: a narrow table by default (the Timeline tab's columns, blanks not None)
    assert len(shown) == 2 and "step_id" in shown[0] and "run_id" not in shown[0]
    assert "None" not in shown[0] and "idempotency_key" not in shown[0]
    assert shown[1].startswith("<TimelineFigure")
    await shop.ok(f"%chain timeline {rid} --all")
    assert "run_id" in shop.displayed()[0]


async def test_help(shop: Harness, capsys) -> None:
    await shop.ok("%chain help")
    out = capsys.readouterr().out
    assert "%chain approve   approve a step waiting for confirmation" in out
    await shop.ok("%chain")
    assert capsys.readouterr().out == out
    await shop.ok("%chain run --help")
    assert "usage: %chain run [-h]" in capsys.readouterr().out


# ---------------------------------------------------------------------- plan
async def test_plan_with_a_scripted_model(shop: Harness) -> None:
    pytest.importorskip("openai")
    from chainlab.testing.openai_server import FakeOpenAI

    plan = {"name": "drafted", "description": "two bookings",
            "steps": [{"id": "f", "tool": "book", "args": {"what": "flight"}},
                      {"id": "h", "tool": "book", "args": {"what": "hotel"},
                       "depends_on": ["f"]}]}
    with FakeOpenAI(script=[plan]) as server:
        shop.ns["url"] = server.base_url
        await shop.ok(f'%chain plan "book a flight and a hotel" --as trip3 --tools tb '
                      f"--model fake --base-url {server.base_url}")
        assert len(server.completions) == 1
    chain = shop.ns["trip3"]
    assert chain.step_ids == ["f", "h"]
    text, = shop.displayed()
    assert text.startswith("chain 'drafted' (toolbox 'shop'): 2 steps, valid")
    assert "planned by model (fake, 1 round)" in text


async def test_plan_usage_errors(shop: Harness) -> None:
    assert "--as" in await shop.usage_error('%chain plan "x"')
    assert "NAME must be a Python identifier" in await shop.usage_error(
        '%chain plan "x" --as 2x')
    assert "no planner object 'p'" in await shop.usage_error('%chain plan "x" --as y --planner p')


async def test_more_usage_errors(shop: Harness) -> None:
    assert "'tb' is already a Toolbox in the notebook; pick another NAME" in \
        await shop.usage_error("%%chain tb\nsteps: []\n")
    (shop.tmp_path / "afile").write_text("x")
    assert "cannot open the store 'afile/x.db'" in await shop.usage_error(
        "%chain runs --db afile/x.db")


async def test_plan_with_a_planner_object(shop: Harness) -> None:
    await shop.ok("from chainlab.planner import FallbackPlanner\nplanner = FallbackPlanner()\n"
                  "planner.add_template({'name': 'hol', 'steps': [{'id': 'f', 'tool': 'book', "
                  "'args': {'what': 'flight'}}]}, keywords=['holiday'])")
    await shop.ok('%chain plan "plan my holiday" --as hol --planner planner --tools tb')
    assert shop.ns["hol"].step_ids == ["f"]
    text, = shop.displayed()
    assert "planned by fallback" in text
    assert "either --planner or --model" in await shop.usage_error(
        '%chain plan "x" --as y --planner planner --model m')


async def test_whatif_compares_the_real_schedule_with_a_replay(shop: Harness) -> None:
    await shop.ok("run = %chain run trip\nawait run.wait()")
    rid = shop.ns["run"].run_id
    fig = await shop.ok(f"%chain whatif {rid} --priority declaration --concurrency 1")
    assert len(fig.axes) == 2
    assert "what-if declaration, concurrency 1" in fig.axes[1].get_title(loc="left")
    assert "invalid choice: 'x'" in await shop.usage_error(f"%chain whatif {rid} --priority x")
