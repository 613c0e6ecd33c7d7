"""What the command line reads: toolboxes (``MODULE:TOOLBOX``), chain files, JSON options
and the store, through :mod:`chainlab.workspace` (what every front end shares). Every mistake
is a :class:`~chainlab.errors.UsageError` (or a CliError, one) that names the bad value and
the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chainlab._text import did_you_mean
from chainlab.cli.common import CliError
from chainlab.plan.schema import Chain
from chainlab.store.base import FROM_META, RunRecord, Store
from chainlab.tools import Toolbox
from chainlab.workspace import (
    DEFAULT_DB,
    Workspace,
    add_mcp_servers,
    load_toolbox,
    parse_json,
    parse_json_object,
    parse_step_values,
)

__all__ = [
    "DEFAULT_DB",
    "deployment_rules",
    "load_chain",
    "load_policies",
    "load_toolbox",
    "load_tools",
    "open_store",
    "parse_json",
    "parse_json_object",
    "parse_step_values",
    "toolbox_for_run",
]

_CHAIN_SUFFIXES = (".yaml", ".yml", ".json")


# --------------------------------------------------------------------------- toolboxes
def load_tools(spec: str | None, mcp: Sequence[str] | None, command: str,
               optional: bool = False) -> Toolbox:
    """The toolbox of ``--tools`` plus the tools of each ``--mcp`` server (``optional``: an
    empty toolbox when neither is given, for an agent that brings its tools). Raises
    CliError when neither is given."""
    if not spec and not mcp and optional:
        return Toolbox(command)
    if not spec and not mcp:
        raise CliError(f"`chainlab {command}` needs --tools MODULE:TOOLBOX (the module that "
                       "defines your tools) or --mcp CMD|URL (an MCP server)",
                       hint="for example --tools mytools:toolbox, or set CHAINLAB_TOOLS")
    toolbox = load_toolbox(spec) if spec else None
    return add_mcp_servers(toolbox, mcp) if mcp else toolbox  # type: ignore[return-value]


def toolbox_for_run(record: RunRecord, spec: str | None) -> tuple[Toolbox, str]:
    """The toolbox to continue a run with: ``--tools`` if given, else the one the run was
    started with (kept in the run's meta by ``chainlab run``)."""
    spec = spec or record.meta.get("tools")
    mcp = record.meta.get("mcp") or []
    if mcp and not spec:  # started with --mcp only
        return add_mcp_servers(None, mcp), ""
    if not spec and FROM_META in record.meta:  # `chainlab agent --from`: the agent brings
        return Toolbox("agent"), ""  # its tools (the runtime imports it again)
    if not spec:
        raise CliError(f"run {record.run_id!r} was not started by `chainlab run`, so its "
                       "toolbox is unknown", hint="pass --tools MODULE:TOOLBOX")
    cwd = record.meta.get("cwd")
    toolbox = load_toolbox(spec, extra_paths=[cwd] if isinstance(cwd, str) else ())
    return (add_mcp_servers(toolbox, mcp) if mcp else toolbox), spec


# --------------------------------------------------------------------------- chains
def load_chain(path: Path) -> Chain:
    """A chain from a YAML or JSON file. Raises CliError (no such file), PlanError."""
    if not path.is_file():
        siblings = [p.name for p in path.parent.glob("*") if p.suffix in _CHAIN_SUFFIXES] \
            if path.parent.is_dir() else []
        raise CliError(f"no such chain file {str(path)!r}{did_you_mean(path.name, siblings)}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {str(path)!r}: {exc}") from None
    return Chain.from_json(text) if path.suffix == ".json" else Chain.from_yaml(text)


# --------------------------------------------------------------------------- rules
_DEPLOYMENT: list[dict[str, Any]] = []  # --policies of this command (one per process)


def load_policies(path: Path | None) -> list[dict[str, Any]]:
    """``--policies FILE`` (YAML or JSON: a list of rules, or ``{policies: [...]}``): the
    deployment's rules every Runtime this command makes is given (DESIGN §21); checked
    when the Runtime is made. Raises CliError for a file that is not a list of rules."""
    if path is None:
        return _DEPLOYMENT
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = json.loads(text) if path.suffix == ".json" else _yaml(text)
    except (OSError, ValueError) as exc:
        raise CliError(f"--policies {str(path)!r} cannot be read: {exc}",
                       hint="a YAML or JSON list of rules {id, tool, when, decision, "
                            "reason}") from None
    if isinstance(data, dict) and list(data) == ["policies"]:
        data = data["policies"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CliError(f"--policies {str(path)!r} must hold a list of rules",
                       hint="- {id: small, tool: refund, when: 'args.amount <= 100', "
                            "decision: approve}")
    _DEPLOYMENT[:] = data
    return _DEPLOYMENT


def deployment_rules() -> list[dict[str, Any]]:
    """The rules ``--policies`` loaded in this process, else those of the file
    ``CHAINLAB_POLICIES`` names (none: ``[]``): every command that drives a run (approve,
    resume, fork...) keeps the deployment's rules."""
    import os

    if not _DEPLOYMENT and os.environ.get("CHAINLAB_POLICIES"):
        load_policies(Path(os.environ["CHAINLAB_POLICIES"]))
    return list(_DEPLOYMENT)


def _yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None


# --------------------------------------------------------------------------- store
def open_store(db: str, *, must_exist: bool, readonly: bool = False) -> Store:
    """The store at ``db`` (``--db`` / ``CHAINLAB_DB``, through
    :func:`chainlab.store.open_store`: a path, ``sqlite:///path``, ``postgresql://...``,
    ``:memory:``); with ``must_exist`` a missing file is a CliError (reading commands never
    create an empty database by accident); ``readonly`` opens it without writing anything.

    Raises CliError, StoreError (a URL that is not supported, a file that cannot be used:
    one line naming the file and the fix, exit code 1).
    """
    where = str(db)
    if isinstance(db, Path) and re.match(r"^sqlite:/(?!/)", where):
        # typer made a Path of it, which folds '//' into '/': which file was meant is lost
        raise CliError(f"--db {where!r}: give the SQLite file's path (sqlite:/// URLs are "
                       "not taken on the command line)", hint="for example --db runs/x.db")
    return Workspace().store(db, must_exist=must_exist, readonly=readonly)
