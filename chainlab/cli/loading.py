"""What the command line reads: toolboxes (``MODULE:TOOLBOX``), chain files, JSON options
and the store. Every mistake becomes a :class:`CliError` that names the bad value and the fix.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from chainlab._text import did_you_mean
from chainlab.cli.common import CliError
from chainlab.plan.schema import Chain
from chainlab.store import open as store_open
from chainlab.store.base import RunRecord, Store
from chainlab.store.sqlite import DEFAULT_PATH
from chainlab.tools import Toolbox

__all__ = [
    "DEFAULT_DB",
    "load_chain",
    "load_toolbox",
    "open_store",
    "parse_json",
    "parse_json_object",
    "toolbox_for_run",
]

DEFAULT_DB = str(DEFAULT_PATH)
_CHAIN_SUFFIXES = (".yaml", ".yml", ".json")


# --------------------------------------------------------------------------- toolboxes
def load_toolbox(spec: str, *, extra_paths: Iterable[str] = ()) -> Toolbox:
    """Import ``MODULE:TOOLBOX`` (or ``path/to/file.py:TOOLBOX``, or just ``MODULE`` when it
    defines exactly one Toolbox). The current directory is importable, like ``python -m``.

    Raises CliError naming what is missing, with a did-you-mean.
    """
    spec = spec.strip()
    module_name, colon, attr = spec.partition(":")
    if not module_name or (colon and not attr):
        raise CliError(f"--tools {spec!r} must be MODULE:TOOLBOX",
                       hint="for example: --tools mytools:toolbox")
    _importable(os.getcwd(), *extra_paths)
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise CliError(f"no such file {module_name!r} (from --tools {spec!r})")
        _importable(str(path.resolve().parent))
        module_name = path.stem
    module = _import(module_name, spec)
    if not attr:
        return _only_toolbox(module, module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = _toolbox_names(module) or [n for n in vars(module) if not n.startswith("_")]
            raise CliError(f"module {module_name!r} has no attribute {attr!r}"
                           f"{did_you_mean(attr, names)}")
        obj = getattr(obj, part)
    if not isinstance(obj, Toolbox):
        boxes = _toolbox_names(module)
        hint = f"toolboxes in {module_name!r}: {', '.join(boxes)}" if boxes else \
            "create one with `toolbox = chainlab.Toolbox('name')` and register tools on it"
        raise CliError(f"{spec!r} is a {type(obj).__name__}, not a chainlab.Toolbox", hint=hint)
    return obj


def _importable(*paths: str) -> None:
    for path in paths:
        if path and path not in sys.path:
            sys.path.insert(0, path)


def _import(module_name: str, spec: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            local = [m.name for m in pkgutil.iter_modules([os.getcwd()])]
            raise CliError(
                f"no module named {module_name!r}{did_you_mean(module_name, local)}",
                hint="run chainlab from the directory that holds it, or add that directory "
                     "to PYTHONPATH") from None
        raise CliError(f"importing {module_name!r} (from --tools {spec!r}) failed: {exc}",
                       hint="install the missing package in this environment") from None
    except Exception as exc:
        raise CliError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}",
            hint=f"see the traceback with: python -c 'import {module_name}'") from None


def _toolbox_names(module: Any) -> list[str]:
    return [n for n, v in vars(module).items() if isinstance(v, Toolbox)]


def _only_toolbox(module: Any, module_name: str) -> Toolbox:
    names = _toolbox_names(module)
    if len(names) == 1:
        return getattr(module, names[0])  # type: ignore[no-any-return]
    if not names:
        raise CliError(f"module {module_name!r} defines no chainlab.Toolbox",
                       hint="name one: --tools MODULE:TOOLBOX")
    raise CliError(f"module {module_name!r} defines several toolboxes ({', '.join(names)})",
                   hint=f"pick one: --tools {module_name}:{names[0]}")


def toolbox_for_run(record: RunRecord, spec: str | None) -> tuple[Toolbox, str]:
    """The toolbox to continue a run with: ``--tools`` if given, else the one the run was
    started with (kept in the run's meta by ``chainlab run``)."""
    spec = spec or record.meta.get("tools")
    if not spec:
        raise CliError(f"run {record.run_id!r} was not started by `chainlab run`, so its "
                       "toolbox is unknown", hint="pass --tools MODULE:TOOLBOX")
    cwd = record.meta.get("cwd")
    return load_toolbox(spec, extra_paths=[cwd] if isinstance(cwd, str) else ()), spec


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


# --------------------------------------------------------------------------- JSON options
def parse_json(value: str, option: str) -> Any:
    """JSON text, or ``@file`` (JSON, or YAML for ``.yaml``/``.yml``). Raises CliError."""
    source = option
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise CliError(f"{option} {value!r}: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"{option}: cannot read {str(path)!r}: {exc}") from None
        source = f"{option} file {str(path)!r}"
        if path.suffix in (".yaml", ".yml"):
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise CliError(f"{source} is not valid YAML: {exc}") from None
        value = text
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise CliError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column "
                       f"{exc.colno})", hint=_json_hint(option)) from None


def _json_hint(option: str) -> str:
    return (f"quote it for the shell, e.g. {option} '{{\"key\": \"value\"}}', "
            f"or read it from a file: {option} @file.json")


def parse_json_object(value: str | None, option: str) -> dict[str, Any] | None:
    """Like :func:`parse_json`, but the value must be an object (``{...}``)."""
    if value is None:
        return None
    data = parse_json(value, option)
    if not isinstance(data, Mapping):
        raise CliError(f"{option} must be a JSON object ({{...}}), got "
                       f"{type(data).__name__} {json.dumps(data)[:60]}",
                       hint=_json_hint(option))
    return dict(data)


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
    location = store_open.store_location(db)
    if must_exist and location != store_open.MEMORY and not store_open.is_server(location) \
            and not Path(location).is_file():
        raise CliError(f"no chainlab database at {where!r}",
                       hint="start a run first (`chainlab run` / `chainlab demo`) or point "
                            "--db (or CHAINLAB_DB) at the right file")
    try:
        return store_open.open_store(location, readonly=readonly)
    except OSError as exc:  # the store maps what it knows; this is the safety net
        raise CliError(f"cannot open the database {where!r}: {exc}") from None
