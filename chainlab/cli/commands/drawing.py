"""``chainlab render``: a chain file or a stored run as SVG (Graphviz) or DOT text."""

from __future__ import annotations

from pathlib import Path

from chainlab.cli.common import CliError, ExitCode
from chainlab.cli.loading import load_chain, load_toolbox, open_store, toolbox_for_run

__all__ = ["draw"]

_SVG = (".svg",)
_DOT = (".dot", ".gv")


def draw(target: str, output: Path, tools: str | None, db: str) -> None:
    """Write the drawing of ``target`` (a chain file, else a run id) to ``output``.

    Raises CliError, PlanError, RunNotFoundError, GraphvizUnavailable/GraphvizError.
    """
    suffix = output.suffix.lower()
    if suffix not in _SVG + _DOT:
        raise CliError(f"-o {str(output)!r}: cannot tell the format; use .svg, or .dot/.gv "
                       "for DOT text")
    from chainlab import render

    path = Path(target)
    if path.is_file() or path.suffix.lower() in (".yaml", ".yml", ".json"):
        chain = load_chain(path)
        toolbox = load_toolbox(tools) if tools else None
        problems = chain.problems(toolbox)  # drawn on the faulty steps, not refused
        dot = render.chain_dot(chain, toolbox, problems=problems)
        svg = (lambda: render.chain_svg(chain, toolbox, problems=problems)) \
            if suffix in _SVG else None
    else:
        from chainlab.runtime.runtime import Runtime

        store = open_store(db, must_exist=True, readonly=True)
        record = store.get_run(target)
        try:
            toolbox, _ = toolbox_for_run(record, tools)
        except CliError:
            toolbox = None  # a run is drawn from its stored chain; the toolbox adds shapes
        run = Runtime(toolbox, store).get_run(target)
        dot = render.run_dot(run)
        svg = (lambda: render.run_svg(run)) if suffix in _SVG else None
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = svg() if svg is not None else dot
    except (render.GraphvizUnavailable, render.GraphvizError) as exc:
        raise CliError(f"cannot draw {target!r}: {exc}", code=ExitCode.FAILED,
                       hint="install Graphviz (`apt-get install graphviz`) or "
                            "`pip install \"chainlab[jupyter]\"`, or write DOT: -o dag.dot"
                       ) from None
    output.write_text(text, encoding="utf-8")
