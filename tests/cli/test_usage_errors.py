"""Every mistake a user can make on the command line: exit code 2, a one-line message that
names the bad value (with a did-you-mean where there is one), never a traceback, and no run
changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import TOOLS, chainlab, write

CHAIN = """
name: payout
steps:
  - id: send
    tool: transfer
    args: {to: "{{ context.to }}", amount: 100}
"""


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A directory with a chain file and one run suspended at its confirmation."""
    cwd = tmp_path_factory.mktemp("usage")
    write(cwd / "payout.yaml", CHAIN)
    write(cwd / "broken.yaml", "name: x\nsteps:\n  - id: a\n   tool: b\n")
    write(cwd / "unknown.yaml", "name: x\nsteps:\n  - {id: a, tool: ad, args: {a: 1, b: 2}}\n")
    write(cwd / "list.json", "[1, 2]")
    r = chainlab("run", "payout.yaml", "--tools", TOOLS, "-c", '{"to": "al"}', cwd=cwd)
    assert r.code == 3
    return cwd, r.run_id()


RUN = "<run>"  # replaced by the suspended run's id
CASES = {
    # name: (argv, substrings of stderr)
    "no command args": (["run"], ["Missing argument"]),
    "unknown command": (["frobnicate"], ["No such command"]),
    "no --tools": (["run", "payout.yaml"], ["needs --tools MODULE:TOOLBOX"]),
    "tools without toolbox name": (["run", "payout.yaml", "--tools", "example_tools:"],
                                   ["must be MODULE:TOOLBOX"]),
    "module not found": (["run", "payout.yaml", "--tools", "exmple_tools:toolbox"],
                         ["no module named 'exmple_tools'"]),
    "attribute not found": (["run", "payout.yaml", "--tools", "example_tools:tolbox"],
                            ["has no attribute 'tolbox'", "did you mean 'toolbox'"]),
    "not a toolbox": (["run", "payout.yaml", "--tools", "example_tools:add"],
                      ["is a Tool, not a chainlab.Toolbox", "toolboxes in 'example_tools'"]),
    "ambiguous module": (["run", "payout.yaml", "--tools", "example_tools"],
                         ["several toolboxes (toolbox, other)"]),
    "missing tools file": (["run", "payout.yaml", "--tools", "nope.py:toolbox"],
                           ["no such file 'nope.py'"]),
    "missing chain file": (["run", "payot.yaml", "--tools", TOOLS],
                           ["no such chain file 'payot.yaml'", "did you mean 'payout.yaml'"]),
    "bad YAML": (["run", "broken.yaml", "--tools", TOOLS],
                 ["broken.yaml has 1 problem", "[bad_syntax]", "line 4"]),
    "plan problems": (["run", "unknown.yaml", "--tools", TOOLS],
                      ["[unknown_tool]", "did you mean 'add'"]),
    "missing context key": (["run", "payout.yaml", "--tools", TOOLS],
                            ["context.to"]),
    "context not JSON": (["run", "payout.yaml", "--tools", TOOLS, "-c", "{to: al}"],
                         ["--context is not valid JSON", "line 1, column 2"]),
    "context not an object": (["run", "payout.yaml", "--tools", TOOLS, "-c", "@list.json"],
                              ["--context must be a JSON object", "got list"]),
    "context file missing": (["run", "payout.yaml", "--tools", TOOLS, "-c", "@ctx.json"],
                             ["no such file 'ctx.json'"]),
    "concurrency 0": (["run", "payout.yaml", "--tools", TOOLS, "--concurrency", "0"],
                      ["--concurrency"]),
    "unknown run": (["show", "20200101-000000-abcdef"], ["no run '20200101-000000-abcdef'"]),
    "run id typo": (["approve", RUN[:-1] + "X", "send"], ["did you mean"]),
    "unknown step": (["approve", RUN, "sned"], ["no step 'sned'", "did you mean 'send'"]),
    "step not in doubt": (["resolve", RUN, "send", "--retry"],
                          ["cannot resolve step 'send'", "not in_doubt"]),
    "resolve without a decision": (["resolve", RUN, "send"], ["exactly one of"]),
    "resolve with two decisions": (["resolve", RUN, "send", "--retry", "--fail"],
                                   ["exactly one of", "--retry and --fail"]),
    "reject without reason": (["reject", RUN, "send"], ["Missing option '--reason'"]),
    "approve args not JSON": (["approve", RUN, "send", "--args", "{amount: 1}"],
                              ["--args is not valid JSON"]),
    "resume a finished run?": (["rollback", "20200101-000000-abcdef"], ["no run"]),
    "no database": (["runs", "--db", "nowhere/x.db"], ["no chainlab database at"]),
    "render format": (["render", "payout.yaml", "-o", "x.png"], ["cannot tell the format"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_usage_error(ws: tuple[Path, str], case: str) -> None:
    cwd, run_id = ws
    argv, expected = CASES[case]
    argv = [a.replace(RUN[:-1] + "X", run_id[:-1] + ("0" if run_id[-1] != "0" else "1"))
            .replace(RUN, run_id) for a in argv]
    r = chainlab(*argv, cwd=cwd)
    assert r.code == 2, (case, r.code, r.out, r.err)
    for text in expected:
        assert text in r.err, (case, r.err)
    # nothing changed: the run still waits, at its first epoch
    shown = chainlab("show", run_id, "--json", cwd=cwd).json
    assert [(w["step_id"], w["kind"]) for w in shown["waiting"]] == [("send", "confirm")]
    [record] = chainlab("runs", "--json", cwd=cwd).json
    assert record["epoch"] == 1


def test_show_of_a_suspended_run_exits_3(ws: tuple[Path, str]) -> None:
    cwd, run_id = ws
    r = chainlab("show", run_id, cwd=cwd)
    assert r.code == 3 and f"chainlab approve {run_id} send" in r.out
