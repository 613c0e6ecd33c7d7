"""A toolbox's redactor travels with it (chainlab.redaction): ``chainlab run`` in one process
and ``chainlab resume`` in another, both loading the toolbox, store nothing unmasked; the
resumed process, which has only the masks, makes the step that needs the real value wait
for a person (reason ``redacted``) instead of running with the mask."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import chainlab

SECRET = "sk-live-0badc0ffee"
TOOLS = '''
from chainlab import Toolbox
from chainlab.redaction import mask_pattern

toolbox = Toolbox("keys", redact=mask_pattern(r"sk-live-[0-9a-f]+"))


@toolbox.tool
def fetch(user: str) -> dict:
    return {"user": user, "key": "SECRET"}


@toolbox.tool(side_effects=True, requires_confirmation=True)
def keep(key: str) -> str:
    with open("kept.txt", "a") as out:
        out.write(key + "\\n")
    return "kept"
'''.replace("SECRET", SECRET)
CHAIN = """
name: keys
steps:
  - {id: fetch, tool: fetch, args: {user: ann}}
  - {id: keep, tool: keep, args: {key: "{{ steps.fetch.output.key }}"}}
"""


def test_the_toolbox_redactor_holds_in_every_process(tmp_path: Path) -> None:
    (tmp_path / "key_tools.py").write_text(TOOLS)
    (tmp_path / "keys.yaml").write_text(CHAIN)
    db = str(tmp_path / "runs.db")
    started = chainlab("run", "keys.yaml", "--tools", "key_tools:toolbox", "--db", db,
                       cwd=tmp_path)
    run_id = started.run_id()
    shown = chainlab("show", run_id, "--json", "--db", db, cwd=tmp_path)
    assert SECRET not in shown.out and "[redacted]" in shown.out
    waiting = shown.json["waiting"][0]
    assert waiting["step_id"] == "keep" and "[redacted]" in json.dumps(waiting)
    # another process approves: it has only the masked args, so the step waits again
    chainlab("approve", run_id, "keep", "--tools", "key_tools:toolbox", "--db", db,
             cwd=tmp_path)
    again = chainlab("show", run_id, "--json", "--db", db, cwd=tmp_path).json
    assert not (tmp_path / "kept.txt").exists()  # never run with the mask
    assert again["steps"]["keep"]["status"] == "waiting_confirmation"
    assert again["steps"]["keep"]["reason"] == "redacted"
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
    assert SECRET.encode() not in raw
