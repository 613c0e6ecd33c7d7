"""What every front end shares (DESIGN §1): the notebook, the command line and the HTTP
service each turn what a person typed into chainlab objects the same way, here.

* :class:`Workspace`: stores opened once per location (``--db``, ``CHAINLAB_DB``, the
  default ``.chainlab/chainlab.db``, through :func:`chainlab.store.open_store`), one
  :class:`~chainlab.runtime.Runtime` per toolbox and store, and runs found by id across those
  stores with a did-you-mean;
* :func:`load_toolbox`: ``MODULE:TOOLBOX`` (or ``path/to/file.py:TOOLBOX``) imported;
  :func:`add_mcp_servers`: the tools of MCP servers (``--mcp CMD|URL``) added to it;
* :func:`parse_json`, :func:`parse_json_object` and :func:`parse_step_values` (the
  ``STEP=JSON`` pairs of ``--args`` and ``--output``), ``@file`` included.

Every mistake is a :class:`~chainlab.errors.UsageError` whose message names the bad value
and whose hint says the fix; each front end shows it its own way (an IPython UsageError, an
``error:`` line and exit code 2, a 4xx JSON body).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chainlab._text import did_you_mean
from chainlab.errors import PlanError, RunNotFoundError, StoreError, UsageError
from chainlab.plan.yamltext import parse as parse_yaml
from chainlab.runtime.runtime import Runtime
from chainlab.store import open as store_open
from chainlab.store.base import RunRecord, Store
from chainlab.store.sqlite import DEFAULT_PATH
from chainlab.tools import Toolbox

__all__ = [
    "DEFAULT_DB",
    "Workspace",
    "add_mcp_servers",
    "load_toolbox",
    "parse_json",
    "parse_json_object",
    "parse_step_values",
]

DEFAULT_DB = str(DEFAULT_PATH)


# --------------------------------------------------------------------------- stores, runs
class Workspace:
    """Stores, runtimes and run lookup of one front-end process.

    ``inline_reads``: stores are opened with ``blocking = False``, so the runtime reads them
    on the caller's thread instead of a worker thread (the notebook's magics and buttons are
    synchronous code running ON the event loop: see :mod:`chainlab.jupyter._loop`)."""

    def __init__(self, *, inline_reads: bool = False):
        self.inline_reads = inline_reads
        self.stores: dict[str, Store] = {}
        self.runtimes: dict[tuple[int, str], Runtime] = {}

    def store_key(self, db: str | os.PathLike[str] | None) -> str:
        """``":memory:"``, a ``postgresql://`` URL or the absolute path of the SQLite file
        that ``db`` means (None: ``CHAINLAB_DB``, else the default file). Raises
        UsageError for a location that is not supported."""
        try:
            where = store_open.store_location(db or None)
        except StoreError as exc:
            raise UsageError(str(exc)) from None
        if where == store_open.MEMORY or store_open.is_server(where):
            return where  # a server's URL is no file to resolve
        return str(Path(where).expanduser().resolve())

    def store(self, db: str | os.PathLike[str] | None = None, *, must_exist: bool = False,
              readonly: bool = False) -> Store:
        """The store at ``db``, opened once. With ``must_exist`` a missing SQLite file is a
        UsageError (a reading command never creates an empty database by accident);
        ``readonly`` opens it without writing anything.

        Raises UsageError, StoreError (a file or server that cannot be used: the message
        names it and the fix)."""
        key = self.store_key(db)
        store = self.stores.get(key)
        if store is not None:
            return store
        if must_exist and key != store_open.MEMORY and not store_open.is_server(key) \
                and not Path(key).is_file():
            raise UsageError(f"no chainlab database at {str(db or key)!r}",
                             hint="start a run first (`chainlab run` / `chainlab demo`) or "
                                  "point --db (or CHAINLAB_DB) at the right file")
        # opened as the person wrote it (messages name the file that way), kept by its key
        location = key if key == store_open.MEMORY or store_open.is_server(key) \
            else store_open.store_location(db or None)
        try:
            store = store_open.open_store(location, readonly=readonly)
        except OSError as exc:  # the store maps what it knows; this is the safety net
            raise UsageError(f"cannot open the store {store_open.redacted(str(db or key))!r}: "
                             f"{exc}") from None
        if self.inline_reads:
            store.blocking = False
        self.stores[key] = store
        return store

    def runtime(self, toolbox: Toolbox, db: str | os.PathLike[str] | None = None) -> Runtime:
        """One runtime per toolbox and store (created on first use)."""
        key = (id(toolbox), self.store_key(db))
        runtime = self.runtimes.get(key)
        if runtime is None:
            runtime = self.runtimes[key] = Runtime(toolbox, self.store(db))
        return runtime

    def find_record(self, run_id: str, db: str | os.PathLike[str] | None = None
                    ) -> tuple[str, RunRecord]:
        """The store (its key) that holds ``run_id``, and the run's record. Looks in ``db``
        if given, else in every store opened here, then the default file if it exists.
        Raises UsageError with a did-you-mean over the runs seen."""
        keys = [self.store_key(db)] if db else self.known_keys()
        seen: list[str] = []
        for key in keys:
            store = self.store(key)
            try:
                return key, store.get_run(run_id)
            except RunNotFoundError:
                seen += [r.run_id for r in store.list_runs(200)]
        where = str(db) if db else ", ".join(keys) or DEFAULT_DB
        raise UsageError(f"no run {run_id!r} in {where}{did_you_mean(run_id, seen)}",
                         hint="list the runs with `chainlab runs` or `%chain runs`")

    def known_keys(self) -> list[str]:
        """Every store opened here, then the default file when it exists."""
        keys = list(self.stores)
        default = self.store_key(None)
        if default not in keys and Path(default).exists():
            keys.append(default)
        return keys

    def close(self) -> None:
        """Flush and close every store opened here."""
        for store in self.stores.values():
            store.close()
        self.stores.clear()
        self.runtimes.clear()


# --------------------------------------------------------------------------- toolboxes
def load_toolbox(spec: str, *, extra_paths: Iterable[str] = ()) -> Toolbox:
    """Import ``MODULE:TOOLBOX`` (or ``path/to/file.py:TOOLBOX``, or just ``MODULE`` when it
    defines exactly one Toolbox). The current directory is importable, like ``python -m``.
    Raises UsageError naming what is missing, with a did-you-mean.
    """
    spec = spec.strip()
    module_name, colon, attr = spec.partition(":")
    if not module_name or (colon and not attr):
        raise UsageError(f"--tools {spec!r} must be MODULE:TOOLBOX",
                         hint="for example: --tools mytools:toolbox")
    _importable(os.getcwd(), *extra_paths)
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise UsageError(f"no such file {module_name!r} (from --tools {spec!r})")
        _importable(str(path.resolve().parent))
        module_name = path.stem
    module = _import(module_name, spec)
    if not attr:
        return _only_toolbox(module, module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = _toolbox_names(module) or [n for n in vars(module) if not n.startswith("_")]
            raise UsageError(f"module {module_name!r} has no attribute {attr!r}"
                             f"{did_you_mean(attr, names)}")
        obj = getattr(obj, part)
    if not isinstance(obj, Toolbox):
        boxes = _toolbox_names(module)
        hint = f"toolboxes in {module_name!r}: {', '.join(boxes)}" if boxes else \
            "create one with `toolbox = chainlab.Toolbox('name')` and register tools on it"
        raise UsageError(f"{spec!r} is a {type(obj).__name__}, not a chainlab.Toolbox",
                         hint=hint)
    return obj


def add_mcp_servers(toolbox: Toolbox | None, specs: Iterable[str]) -> Toolbox:
    """The tools of each MCP server in ``specs`` added to ``toolbox`` (a new toolbox called
    ``mcp`` when None). A spec is a command line (``python -m server``: a stdio server) or a
    URL (``http://127.0.0.1:8765/mcp``), optionally ``PREFIX=`` first: its tools are then
    registered as ``PREFIX__name``. Raises UsageError naming the server and the fix."""
    from chainlab.errors import MCPServerError, ToolDefinitionError
    from chainlab.mcp import parse_spec

    box = toolbox if toolbox is not None else Toolbox("mcp")
    for spec in specs:
        prefix, eq, rest = spec.partition("=")
        options: dict[str, Any] = {}
        if eq and prefix.replace("_", "").replace("-", "").isalnum() and " " not in prefix:
            options["prefix"], spec = prefix, rest
        try:
            box.add_mcp(**parse_spec(spec), **options)
        except MCPServerError as exc:
            raise UsageError(f"--mcp {spec!r}: MCP server {exc.server!r}: {exc.problem}",
                             hint=exc.fix) from None
        except ToolDefinitionError as exc:
            raise UsageError(f"--mcp {spec!r}: {exc}",
                             hint=f"prefix its tools: --mcp 'NAME={spec}'") from None
    return box


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
            raise UsageError(
                f"no module named {module_name!r}{did_you_mean(module_name, local)}",
                hint="run chainlab from the directory that holds it, or add that directory "
                     "to PYTHONPATH") from None
        raise UsageError(f"importing {module_name!r} (from --tools {spec!r}) failed: {exc}",
                         hint="install the missing package in this environment") from None
    except Exception as exc:
        raise UsageError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}",
            hint=f"see the traceback with: python -c 'import {module_name}'") from None


def _toolbox_names(module: Any) -> list[str]:
    return [n for n, v in vars(module).items() if isinstance(v, Toolbox)]


def _only_toolbox(module: Any, module_name: str) -> Toolbox:
    names = _toolbox_names(module)
    if len(names) == 1:
        return getattr(module, names[0])  # type: ignore[no-any-return]
    if not names:
        raise UsageError(f"module {module_name!r} defines no chainlab.Toolbox",
                         hint="name one: --tools MODULE:TOOLBOX")
    raise UsageError(f"module {module_name!r} defines several toolboxes ({', '.join(names)})",
                     hint=f"pick one: --tools {module_name}:{names[0]}")


# --------------------------------------------------------------------------- JSON values
def parse_json(value: str, option: str) -> Any:
    """JSON text, or ``@file`` (JSON, or YAML for ``.yaml``/``.yml``, read with the plan's
    loader: no aliases). Raises UsageError."""
    source = option
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.is_file():
            raise UsageError(f"{option} {value!r}: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{option}: cannot read {str(path)!r}: {exc}") from None
        source = f"{option} file {str(path)!r}"
        if path.suffix in (".yaml", ".yml"):
            try:
                return parse_yaml(text)[0]
            except PlanError as exc:
                raise UsageError(f"{source}: {exc.problems[0].message}") from None
            except Exception as exc:  # a YAMLError: one line, no traceback
                raise UsageError(f"{source} is not valid YAML: {exc}") from None
        value = text
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column "
                         f"{exc.colno})", hint=_json_hint(option)) from None
    except ValueError as exc:  # an integer too long to convert, say
        raise UsageError(f"{source} is not usable JSON: {exc}", hint=_json_hint(option)) \
            from None


def _json_hint(option: str) -> str:
    return (f"quote it for the shell, e.g. {option} '{{\"key\": \"value\"}}', "
            f"or read it from a file: {option} @file.json")


def parse_json_object(value: str | None, option: str) -> dict[str, Any] | None:
    """Like :func:`parse_json`, but the value must be an object (``{...}``)."""
    if value is None:
        return None
    data = parse_json(value, option)
    if not isinstance(data, Mapping):
        raise UsageError(f"{option} must be a JSON object ({{...}}), got "
                         f"{type(data).__name__} {json.dumps(data)[:60]}",
                         hint=_json_hint(option))
    return dict(data)


def parse_step_values(pairs: Iterable[str] | None, option: str) -> dict[str, Any]:
    """``["STEP=JSON", ...]`` (``--args a='{"n": 1}'``, ``--output b=@out.json``) as
    ``{step_id: value}``. Raises UsageError naming the pair and the fix."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        step_id, sep, text = pair.partition("=")
        if not sep or not step_id:
            raise UsageError(f"{option} {pair!r} must be STEP=JSON",
                             hint=f"for example {option} fetch='{{\"n\": 1}}'")
        if text.startswith("@"):
            out[step_id] = parse_json(text, f"{option} {step_id}")
            continue
        try:
            out[step_id] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{option} {step_id}: {text!r} is not JSON ({exc.msg} at column "
                             f"{exc.colno})",
                             hint=f"a string needs double quotes: {option} {step_id}='\"text\"'"
                             ) from None
        except ValueError as exc:
            raise UsageError(f"{option} {step_id}: {exc}") from None
    return out
