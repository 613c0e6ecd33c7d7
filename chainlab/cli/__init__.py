"""``chainlab``: run chains headless, and approve, resolve or roll them back later.

    chainlab run chain.yaml --tools mytools:toolbox --context '{"table_id": "t1"}'
    chainlab agent support "order 7 arrived broken" --tools mytools:toolbox  # one agent
    chainlab agent "refund order 7" --tools mytools:toolbox --model M  # an ad-hoc one
    chainlab approve RUN_ID STEP            # in another process, days later
    chainlab show RUN_ID; chainlab timeline RUN_ID --csv attempts.csv
    chainlab demo                           # a self-contained first look

Runs live in a SQLite file (``--db``, default ``.chainlab/chainlab.db``, or CHAINLAB_DB;
``:memory:`` keeps them in this process only); ``--tools`` may come from CHAINLAB_TOOLS.
Exit codes: 0 success, 1 run failed (or cancelled, or its rollback failed, or the database
could not be used: one line names the file and the fix), 2 usage error (nothing changed),
3 suspended (waits for a person), 4 rolled back, 130 interrupted. The command line is a thin
front end over the same runtime as the notebook and Python API.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from chainlab.cli.commands import experiment as commands_experiment
from chainlab.cli.commands import export as commands_export
from chainlab.cli.commands import fleet as commands_fleet
from chainlab.cli.commands import fork as commands_fork
from chainlab.cli.commands import runs as commands_runs
from chainlab.cli.commands import serve as commands_serve
from chainlab.cli.commands import tools as commands_tools
from chainlab.cli.commands import watch as commands_watch
from chainlab.cli.common import EXIT_CODES_HELP, CliError, reporting_errors, trace_to
from chainlab.cli.driving import Output, db_flag, start_run
from chainlab.cli.executors import executor_for
from chainlab.cli.loading import (
    DEFAULT_DB,
    load_chain,
    load_policies,
    load_toolbox,
    load_tools,
    open_store,
    parse_json_object,
)
from chainlab.cli.options import (
    ChainArg,
    ContextOpt,
    DaskOpt,
    DbOpt,
    JsonOpt,
    McpOpt,
    OtlpOpt,
    PoliciesOpt,
    QuietOpt,
    ToolsOpt,
)
from chainlab.plan.inputs import needed_inputs
from chainlab.plan.schema import Chain, RunOptions
from chainlab.tools import Toolbox

__all__ = ["app", "main"]

app = typer.Typer(
    name="chainlab", no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Design, run and debug chains of tool calls as explicit DAGs. " + EXIT_CODES_HELP,
)


EnqueueOpt = Annotated[bool, typer.Option(
    "--enqueue", help="Do not drive it here: store it queued for the worker fleet "
                      "(`chainlab worker`) and print its id.")]
QueueOpt = Annotated[str | None, typer.Option(
    "--queue", metavar="NAME", help="The queue to enqueue it in (implies --enqueue; "
                                    "default: 'default').")]
KeyOpt = Annotated[str | None, typer.Option(
    "--key", metavar="KEY", help="With --enqueue: an idempotency key (the same request "
                                 "again enqueues nothing new).")]


@app.command()
def run(
    chain_file: ChainArg,
    tools: ToolsOpt = None,
    context: ContextOpt = None,
    db: DbOpt = DEFAULT_DB,
    mcp: McpOpt = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "-j", min=1, help="At most N steps at once (overrides the chain).")
    ] = None,
    dask: DaskOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    enqueue: EnqueueOpt = False,
    queue: QueueOpt = None,
    key: KeyOpt = None,
    otlp: OtlpOpt = None,
    policies: PoliciesOpt = None,
) -> None:
    """Run a chain until it ends or waits for a person (exit 3: then approve/reject it), or
    with --enqueue store it for the worker fleet and exit."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err, source=str(chain_file)):
        trace_to(otlp)
        load_policies(policies)
        toolbox = load_tools(tools, mcp, "run")
        chain = load_chain(chain_file)
        ctx = parse_json_object(context, "--context") or {}
        options = RunOptions(max_concurrency=concurrency) if concurrency else None
        chain.validate(toolbox, context=ctx)
        meta = _run_meta(tools, mcp, str(chain_file))
        code = _start(io, chain, toolbox, ctx, options, meta=meta, db=db, dask=dask,
                      queued=(enqueue, queue, key))
    raise typer.Exit(int(code))


def _run_meta(tools: str | None, mcp: list[str] | None, source: str) -> dict[str, Any]:
    """What a run started here keeps in its meta: ``--tools`` and ``--mcp`` (so a later
    decision, resume or worker loads the same toolbox), the directory and the source."""
    return {"tools": tools or "", "cwd": os.getcwd(), "source": source,
            **({"mcp": list(mcp)} if mcp else {})}


def _start(io: Output, chain: Chain, toolbox: Toolbox, context: dict[str, Any],
           options: RunOptions | None, *, meta: dict[str, Any], db: str,
           dask: str | None, queued: tuple[bool, str | None, str | None]) -> int:
    """What ``run`` and ``agent`` share: open the store, start the run through the one
    runtime and follow it until it ends or waits for a person; with ``--enqueue`` /
    ``--queue`` (``queued``: enqueue, queue, key), store it queued for the worker fleet."""
    enqueue, queue, key = queued
    if enqueue or queue is not None:
        from chainlab.cli.commands.fleet import enqueue_run

        enqueue_run(io, chain=chain, toolbox=toolbox, db=db, context=context,
                    options=options, meta=meta, queue=queue, key=key)
        return 0
    if key is not None:
        raise CliError("--key goes with --enqueue (an idempotency key of the enqueue)")
    store = open_store(db, must_exist=False)
    with executor_for(dask) as executor:
        code, _ = start_run(io, chain=chain, toolbox=toolbox, store=store, db=db,
                            context=context, options=options, meta=meta, executor=executor)
    store.close()
    return int(code)


@app.command()
def agent(
    words: Annotated[list[str], typer.Argument(
        metavar='[NAME] "REQUEST"', help="What the agent is asked, in words; after NAME, an "
                                         "agent registered with toolbox.add_agent (the tool "
                                         "agent:NAME), else an ad-hoc agent offered every "
                                         "tool of the toolbox.")],
    tools: ToolsOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="M", help="Ad-hoc agent: the model (else OPENAI_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option(
        "--base-url", metavar="URL", help="Ad-hoc agent: an OpenAI-compatible server (else "
                                          "OPENAI_BASE_URL; the key comes from "
                                          "OPENAI_API_KEY: a URL carrying one, as "
                                          "user-info or ?api-key=, is refused).")] = None,
    instructions: Annotated[str | None, typer.Option(
        "--instructions", metavar="TEXT", help="Ad-hoc agent: its instructions (default: "
                                               "carry out the request with the tools).")
    ] = None,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME", help="Ad-hoc agent: its name, the step's id (default: "
                                       "assistant).")] = None,
    source: Annotated[str | None, typer.Option(
        "--from", metavar="MODULE:OBJ", help="The agent that object is: a chainlab Agent, or "
                                             "a Pydantic AI / OpenAI Agents SDK agent, "
                                             "converted (it brings its tools; --tools is "
                                             "then optional). The run keeps MODULE:OBJ.")
    ] = None,
    db: DbOpt = DEFAULT_DB,
    mcp: McpOpt = None,
    dask: DaskOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    enqueue: EnqueueOpt = False,
    queue: QueueOpt = None,
    key: KeyOpt = None,
) -> None:
    """Ask one agent one request: a one-step chain run like `chainlab run` runs a chain
    (its calls approved with `chainlab approve RUN NAME/1.1`; exit 3 while one waits), or
    with --enqueue stored for the worker fleet, which restores an ad-hoc agent from the run.
    `chainlab agent NAME "REQUEST"` asks a registered agent; `chainlab agent "REQUEST"
    --model M [--base-url URL]` an ad-hoc one, which the run keeps for later processes;
    `chainlab agent --from MODULE:OBJ "REQUEST"` the agent that object is (a Pydantic AI or
    OpenAI Agents SDK agent is converted), which later processes import again."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err):
        if len(words) > 2:
            raise CliError(f"too many arguments ({len(words)}): give [NAME] \"REQUEST\"",
                           hint="quote the request: chainlab agent \"find order 7\"")
        toolbox = load_tools(tools, mcp, "agent", optional=source is not None)
        from chainlab.agent.adhoc import agent_request  # (the agent command's own)

        ask = agent_request(toolbox, words[0] if len(words) == 2 else None, words[-1],
                            adhoc_name=name, instructions=instructions, model=model,
                            base_url=base_url, source=source)
        ask.chain.validate(ask.toolbox, context=ask.context)
        meta = {**_run_meta(tools, mcp, f"agent {ask.agent}"), **ask.meta}
        code = _start(io, ask.chain, toolbox, ask.context, None, meta=meta, db=db, dask=dask,
                      queued=(enqueue, queue, key))
    raise typer.Exit(int(code))


@app.command()
def validate(
    chain_file: ChainArg,
    tools: ToolsOpt = None,
    context: ContextOpt = None,
    mcp: McpOpt = None,
) -> None:
    """Check a chain (against the toolbox, and the context when given) without running it."""
    io = Output.make()
    with reporting_errors(io.err, source=str(chain_file)):
        chain = load_chain(chain_file)
        toolbox = load_tools(tools, mcp, "validate") if tools or mcp else None
        ctx = parse_json_object(context, "--context")
        chain.validate(toolbox, context=ctx)
        deps = chain.dependencies()
        io.out.print(f"{chain_file}: chain {chain.name!r} is valid ({len(chain.steps)} steps)",
                     markup=False)
        for step in chain.steps:
            after = ", ".join(sorted(deps[step.id]))
            io.out.print(f"  {step.id}: {step.tool}" + (f"  (after {after})" if after else ""),
                         markup=False)
        for line in _interface_lines(chain, ctx):
            io.out.print(line, markup=False)
        if toolbox is None:
            io.err.print("note: without --tools only the structure was checked (ids, graph, "
                         "templates), not tool names or args", markup=False, style="dim")


def _interface_lines(chain: Chain, context: dict[str, Any] | None) -> list[str]:
    """What ``validate`` says about the chain's declared inputs and output."""
    out = []
    if chain.inputs is not None:
        out.append("inputs:" + ("" if chain.inputs else " none (the chain reads no context)"))
        out += [f"  {name}: {spec.summary()}" for name, spec in chain.inputs.items()]
        missing = [k for k in needed_inputs(chain) if context is None or k not in context]
        if missing:
            out.append(f"a run needs --context with {', '.join(missing)}")
    if chain.output is not None:
        out.append(f"output: {json.dumps(chain.output)}")
    return out


@app.command()
def plan(
    request: Annotated[str, typer.Argument(help="What the chain should do, in words.")],
    tools: ToolsOpt = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the chain here (YAML) instead of printing it.")] = None,
    context: ContextOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="The model (else OPENAI_MODEL); needs OPENAI_API_KEY or "
                        "OPENAI_BASE_URL.")] = None,
    mcp: McpOpt = None,
) -> None:
    """Plan a chain from a request: an LLM when OPENAI_API_KEY/OPENAI_BASE_URL are set, else
    the deterministic fallback planner. The chain is validated; nothing runs."""
    io = Output.make()
    with reporting_errors(io.err):
        toolbox = load_tools(tools, mcp, "plan")
        ctx = parse_json_object(context, "--context")
        from chainlab.cli.commands.planning import plan_chain

        chain, note = plan_chain(request, toolbox, ctx, model)
        io.err.print(note, markup=False, style="dim")
        text = chain.to_yaml()
        if output is None:
            io.out.print(text, markup=False, end="", soft_wrap=True)
        else:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8")
            io.err.print(f"wrote {output}; run it with: chainlab run {output} --tools {tools}",
                         markup=False)


@app.command()
def render(
    target: Annotated[str, typer.Argument(metavar="CHAIN_FILE|RUN_ID",
                                          help="A chain file (.yaml/.json) or a run id.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The file to write: .svg, or .dot/.gv for DOT text.")],
    tools: ToolsOpt = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Draw a chain file, or a run with its step statuses, as a DAG (SVG or DOT)."""
    io = Output.make()
    with reporting_errors(io.err, source=target):
        from chainlab.cli.commands.drawing import draw

        draw(target, output, tools, db)
        io.err.print(f"wrote {output}", markup=False)


@app.command()
def demo(
    db: DbOpt = DEFAULT_DB,
    approve: Annotated[bool, typer.Option(
        "--approve", help="Approve the confirmation at once.")] = False,
    ask: Annotated[bool | None, typer.Option(
        "--ask/--no-ask", help="Ask whether to approve (default: when stdin is a terminal); "
                               "else exit 3 and show how to approve later.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """A first look: run an example chain (parallel steps, a retry, a confirmation)."""
    from chainlab.examples import TOOLS, demo_context, sales_report_chain

    io = Output.make(quiet=quiet)
    ask = sys.stdin.isatty() if ask is None else ask
    with reporting_errors(io.err):
        toolbox = load_toolbox(TOOLS)
        chain = sales_report_chain()
        context = demo_context(Path(db).parent / "outbox")
        store = open_store(db, must_exist=False)
        io.err.print(f"chainlab demo: chain {chain.name!r}: {chain.description.strip()}",
                     markup=False, soft_wrap=True)

        async def decide(run: Any) -> None:
            if not approve:
                preview = json.dumps(run.steps["publish"].preview, ensure_ascii=False)
                io.err.print(f"step 'publish' waits for confirmation: {preview}",
                             markup=False, soft_wrap=True)
                question = "Approve it now (no: it waits, and you can approve it later)?"
                if not await anyio.to_thread.run_sync(
                        lambda: typer.confirm(question, default=False, err=True)):
                    return
            await run.approve("publish", note="approved in `chainlab demo`")

        code, run_id = start_run(
            io, chain=chain, toolbox=toolbox, store=store, db=db, context=context,
            options=None, meta={"tools": TOOLS, "demo": True},
            after_suspend=decide if approve or ask else None)
        store.close()
        flag = db_flag(db)
        io.out.print(f"Look at it: chainlab timeline {run_id}{flag} · chainlab render {run_id} "
                     f"-o run.svg{flag} · undo it: chainlab rollback {run_id}{flag}",
                     markup=False, style="dim", soft_wrap=True)
    raise typer.Exit(int(code))


commands_runs.register(app)
commands_fork.register(app)
commands_experiment.register(app)
commands_export.register(app)
commands_watch.register(app)
commands_serve.register(app)
commands_tools.register(app)
commands_fleet.register(app)


def main() -> None:
    """The ``chainlab`` console script."""
    app()
