"""A small example: the toolbox and chain behind ``chainlab demo`` (and the CLI tests).

* :mod:`chainlab.examples.report_tools` - ``toolbox``: fetch sales per region, an exchange
  rate (its first attempt fails, to show a retry), summarise, and publish the report to an
  outbox folder (side-effecting, needs confirmation, compensated by unpublishing it).
* ``sales_report.yaml`` - the chain: three regions in parallel, then the summary, then the
  publication that waits for a person.
* :mod:`chainlab.examples.prompt_steps` and ``clear_ideas.yaml`` - prompt steps (agents
  without tools, one model call each): a document in five steps, two of them at once.

    chainlab run "$(python -c 'import chainlab.examples as e; print(e.SALES_REPORT)')" \\
        --tools chainlab.examples.report_tools:toolbox \\
        --context '{"currency": "EUR", "outbox": "outbox"}'
"""

from __future__ import annotations

from pathlib import Path

from chainlab.plan.schema import Chain

__all__ = ["CLEAR_IDEAS", "SALES_REPORT", "TOOLS", "demo_context", "sales_report_chain"]

#: the example chain file
SALES_REPORT = Path(__file__).with_name("sales_report.yaml")
#: ``--tools`` for the example toolbox
TOOLS = "chainlab.examples.report_tools:toolbox"
#: the prompt-steps example chain (its agents: ``chainlab.examples.prompt_steps:toolbox``)
CLEAR_IDEAS = Path(__file__).with_name("clear_ideas.yaml")


def sales_report_chain() -> Chain:
    """The example chain (validated against the example toolbox when run)."""
    return Chain.from_yaml(SALES_REPORT.read_text(encoding="utf-8"))


def demo_context(outbox: str | Path) -> dict[str, str]:
    """The context the demo runs with: report in EUR, published into ``outbox``."""
    return {"currency": "EUR", "outbox": str(outbox)}
