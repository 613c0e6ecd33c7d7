"""Export a recorded run as a pytest regression test (``chainlab export-test`` and
``%chain export-test``): a test file plus, beside it, a JSON fixture of the recorded
attempts and decisions (``test_NAME.replay.json``), so the test needs no database.

The test replays the run (:mod:`chainlab.testing.replay`) and asserts the same step
statuses, outputs and confirmation points; approvals and resolutions in the recording are
replayed as decisions. It passes at once, and fails with a readable diff when a tool or the
chain changes behaviour.

Which tools run for real (``live``) is written into the test where a person sees it. By
default the tools that can be trusted to answer the same again are live: effect-free, every
recorded call succeeded, and no usage reported (no model, nothing that costs). Everything
else (side effects, flaky or failing calls, paid calls) answers from the recording.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chainlab.errors import PlanError, ReplayError
from chainlab.plan.schema import Chain
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.preparing import toolbox_of
from chainlab.testing.replay import Recording
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.store.base import Store

__all__ = ["Exported", "default_live", "export_experiment_test", "export_test",
           "fixture_path", "render_test", "toolbox_spec"]


@dataclass(frozen=True, slots=True)
class Exported:
    """What :func:`export_test` wrote."""

    test: Path
    fixture: Path
    live: list[str]
    run_id: str


def fixture_path(test: Path) -> Path:
    """``tests/test_x.py`` -> ``tests/test_x.replay.json``."""
    return test.with_name(test.stem + ".replay.json")


def toolbox_spec(toolbox: Toolbox) -> str | None:
    """``MODULE:NAME`` of the module variable that holds ``toolbox`` (looked for in the
    modules its tools are defined in), or None when it lives only in ``__main__`` (a
    notebook): a test in another process could not import it."""
    modules = {getattr(t.fn, "__module__", None) for t in toolbox} - {None, "__main__"}
    for name in sorted(m for m in modules if m):
        module = sys.modules.get(name)
        for attr, value in vars(module).items() if module is not None else ():
            if value is toolbox and not attr.startswith("_"):
                return f"{name}:{attr}"
    return None


def default_live(recording: Recording, toolbox: Toolbox) -> list[str]:
    """The tools a replay can call for real: effect-free, every recorded call succeeded,
    none reported usage (the module docstring says why)."""
    calls: dict[str, list[bool]] = {}
    for call in recording.calls:
        calls.setdefault(call.tool, []).append(
            call.fate == "succeeded" and not call.usage and call.kind == "call")
    return sorted(name for name, ok in calls.items()
                  if name in toolbox and all(ok) and not toolbox.get(name).side_effects)


def export_test(store: Store, run_id: str, out: str | Path, *, tools: str,
                toolbox: Toolbox, live: Sequence[str] | None = None) -> Exported:
    """Write the test file ``out`` and its fixture for run ``run_id`` of ``store``.
    ``tools``: the ``MODULE:TOOLBOX`` the test imports (``toolbox`` is that toolbox, loaded
    here to check the recording against it); ``live``: the tools called for real (default:
    :func:`default_live`).

    Raises RunNotFoundError (no such run), ReplayError (a file name pytest would not
    collect, a run still going, a recorded value that is not JSON, a chain that no longer
    validates, a ``live`` name that is not a tool)."""
    out = Path(out)
    if out.suffix != ".py" or not out.name.startswith("test_"):
        raise ReplayError(f"-o {str(out)!r}: name the test file test_NAME.py so pytest "
                          "collects it (for example -o tests/test_checkout.py)", run_id=run_id)
    recording = Recording.from_store(store, run_id)
    toolbox = toolbox_of(toolbox, recording.meta, run_id)  # (with its ad-hoc agent)
    check_chain(recording, toolbox)
    if live is None:
        live = default_live(recording, toolbox)
    unknown = sorted(set(live) - set(toolbox.names()))
    if unknown:
        raise ReplayError(f"--live {', '.join(unknown)}: no such tool in {tools!r} (it has "
                          f"{', '.join(toolbox.names())})", run_id=run_id)
    fixture = fixture_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    recording.save(fixture)
    out.write_text(render_test(recording, fixture.name, tools=tools, live=live),
                   encoding="utf-8")
    return Exported(out, fixture, sorted(live), run_id)


def check_chain(recording: Recording, toolbox: Toolbox) -> None:
    """Raises ReplayError when the recorded chain no longer validates against ``toolbox``."""
    try:
        chain = Chain.from_dict(recording.chain)
        chains = {n: Chain.from_dict(c) for n, c in recording.chains.items()}
        raise_for_problems(chain, toolbox, chains={**toolbox.chains, **chains})
    except PlanError as exc:
        raise ReplayError(
            f"run {recording.run_id!r}: its chain {recording.chain.get('name')!r} no longer "
            f"validates against toolbox {toolbox.name!r}, so its test could never pass:\n"
            f"{exc}", run_id=recording.run_id) from None


def render_test(recording: Recording, fixture_name: str, *, tools: str,
                live: Iterable[str]) -> str:
    """The text of the test file."""
    name = _identifier(recording.chain.get("name", "run"))
    chain_name = recording.chain.get("name", "?")
    live_list = ", ".join(repr(t) for t in sorted(live))
    replayed = [t for t in recording.tools_used() if t not in set(live)]
    turns = ("\nThe model's turns of its agent steps answer from the recording too (no model "
             "server,\nno network)." if recording.turns else "")
    return f'''"""Regression test exported by chainlab from run {recording.run_id}
(chain {chain_name!r}).

It replays the recorded run from {fixture_name} (its attempts and decisions; no
database needed): the tools in LIVE run for real, the others ({", ".join(replayed) or "none"})
answer from the recording, so nothing with a side effect is called. It fails, with a diff,
when the step statuses, outputs or confirmation points differ from the recording.{turns}
Export it again: chainlab export-test {recording.run_id} -o THIS_FILE --tools {tools}
"""

from pathlib import Path

import anyio

from chainlab.testing.replay import Recording, replay_run
from chainlab.workspace import load_toolbox

FIXTURE = Path(__file__).with_name({fixture_name!r})
TOOLS = {tools!r}
LIVE = [{live_list}]  # called for real; every other tool answers from the recording


def test_replays_{name}() -> None:
    recording = Recording.load(FIXTURE)
    toolbox = load_toolbox(TOOLS, extra_paths=[str(Path(__file__).parent)])
    replayed = anyio.run(lambda: replay_run(recording, toolbox, live=LIVE))
    replayed.assert_same()
'''


def _identifier(run_id: str) -> str:
    """A chain name as the tail of a test function's name (``test_replays_`` + it)."""
    return re.sub(r"\W+", "_", run_id).strip("_") or "run"


def export_experiment_test(store: Store, experiment_id: str, out: str | Path, *, tools: str,
                           toolbox: Toolbox, live: Sequence[str] | None = None
                           ) -> list[Exported]:
    """Write one test file for a stored experiment (DESIGN §22): each replay that finished
    is exported with its fixture (``test_NAME.N.replay.json``), and the test replays each
    one and asserts what the experiment's table says of it (status, outputs, the calls not
    made: a ``needs_live_effect`` step stays skipped). ``live``: as :func:`export_test`
    (default: per replay). Raises ExperimentNotFoundError, ReplayError (no finished replay,
    or as :func:`export_test`)."""
    from chainlab.runtime import Runtime  # (the experiment's rows, read from the store)

    out = Path(out)
    result = Runtime(toolbox, store).experiment_result(experiment_id)
    rows = [r for r in result.rows() if r["new_run"] and r["outcome"] not in (
        "waiting", "unfinished", "not_started")]
    if not rows:
        raise ReplayError(f"experiment {experiment_id!r} has no finished replay to export "
                          "(resume it first: runtime.resume_experiment)")
    cases, done = [], []
    for index, row in enumerate(rows):
        test = out.with_name(f"{out.stem}.{index}.py")
        exported = export_test(store, row["new_run"], test, tools=tools, toolbox=toolbox,
                               live=live)
        test.unlink()  # (only its fixture is kept: the one test file below replays them all)
        cases.append((exported.fixture.name, row["run"], row["outcome"], exported.live))
        done.append(exported)
    out.write_text(_experiment_test(result.experiment_id, result.name, cases, tools),
                   encoding="utf-8")
    return done


def _experiment_test(experiment_id: str, name: str,
                     cases: list[tuple[str, str, str, list[str]]], tools: str) -> str:
    lines = "\n".join(f"    ({fixture!r}, {run!r}, {outcome!r}, {live!r}),"
                      for fixture, run, outcome, live in cases)
    return f'''"""Regression test exported by chainlab from experiment {experiment_id} ({name!r}).

Each case replays one of its replays from its recorded attempts (no database, no model, no
side effect: only the tools in its LIVE list run) and asserts what the experiment's table
says of it: the same statuses and outputs, and a call that was not made
(needs_live_effect) still not made.
Export it again: chainlab export-test --experiment {experiment_id} -o THIS_FILE --tools {tools}
"""

from pathlib import Path

import anyio
import pytest

from chainlab.testing.replay import Recording, replay_run
from chainlab.workspace import load_toolbox

TOOLS = {tools!r}
#: (fixture, the recorded run, the outcome in the experiment's table, the live tools)
CASES = [
{lines}
]


@pytest.mark.parametrize(("fixture", "run", "outcome", "live"), CASES)
def test_experiment_replay(fixture: str, run: str, outcome: str, live: list[str]) -> None:
    recording = Recording.load(Path(__file__).with_name(fixture))
    toolbox = load_toolbox(TOOLS, extra_paths=[str(Path(__file__).parent)])
    replayed = anyio.run(lambda: replay_run(recording, toolbox, live=live))
    replayed.assert_same()
'''
