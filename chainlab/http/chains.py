"""The chains a server serves: loaded from ``--chains`` files and directories (and the
toolbox's registered chains), described for a client (steps, tools, the JSON Schema of the
context they read), drawn, and any chain text validated as the plan layer reports it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chainlab._text import did_you_mean
from chainlab.errors import PlanError, UsageError
from chainlab.http.errors import ApiError, problem_dict
from chainlab.plan.graph import value_refs
from chainlab.plan.inputs import inputs_json_schema
from chainlab.plan.refs import (
    TemplateSyntaxError,
    is_template,
    iter_refs,
    parse_condition,
    parse_template,
)
from chainlab.plan.schema import Chain

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["ServedChains", "chain_summary", "context_schema", "load_chains", "validation"]

CHAIN_SUFFIXES = (".yaml", ".yml", ".json")


def load_chains(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Chain]:
    """Chains from files (``.yaml``, ``.yml``, ``.json``) and directories (every such file
    in it, not recursive), by name. Raises UsageError (a path that is missing, two chains
    with one name) or PlanError (a file that does not parse; the message names it)."""
    out: dict[str, Chain] = {}
    where: dict[str, Path] = {}
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in CHAIN_SUFFIXES)
        elif path.is_file():
            files = [path]
        else:
            raise UsageError(f"--chains {str(given)!r}: no such file or directory",
                             hint="give chain files (.yaml, .json) or directories of them")
        for file in files:
            chain = _load(file)
            if chain.name in out:
                raise UsageError(f"two chains are named {chain.name!r}: {str(where[chain.name])!r} "
                                 f"and {str(file)!r}", hint="give each chain its own name")
            out[chain.name], where[chain.name] = chain, file
    return out


def _load(file: Path) -> Chain:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read chain file {str(file)!r}: {exc}") from None
    try:
        return Chain.from_json(text) if file.suffix == ".json" else Chain.from_yaml(text)
    except PlanError as exc:
        raise PlanError(exc.problems, chain_name=str(file)) from None


class ServedChains:
    """The served chains by name: those loaded from files over the toolbox's own."""

    def __init__(self, toolbox: Toolbox, chains: Mapping[str, Chain] | None = None):
        self.toolbox = toolbox
        self.own = dict(chains or {})

    def all(self) -> dict[str, Chain]:
        return {**self.toolbox.chains, **self.own}

    def get(self, name: str) -> Chain:
        """The chain called ``name``. Raises ApiError 404 with a did-you-mean."""
        chains = self.all()
        chain = chains.get(name)
        if chain is None:
            raise ApiError(404, "not_found",
                           f"no chain {name!r} is served here"
                           f"{did_you_mean(name, chains, list_known=True)}",
                           fix="GET /chains lists them; or send the chain inline "
                               "({\"chain\": {\"name\": ..., \"steps\": [...]}})")
        return chain

    def check(self) -> None:
        """Validate every served chain against the toolbox (at start: a server never
        serves a chain that cannot run). Raises PlanError naming the chain."""
        for chain in self.all().values():
            problems = chain.problems(self.toolbox)
            if problems:
                raise PlanError(problems, chain_name=chain.name)

    def detail(self, name: str) -> dict[str, Any]:
        """``GET /chains/{name}``: the chain, its steps (tool, dependencies, what needs a
        person), the tools it uses and the JSON Schema of its context."""
        chain = self.get(name)
        deps = chain.dependencies()
        tools = {s.tool for s in chain.steps if s.tool in self.toolbox}
        return {
            **chain_summary(chain),
            "steps": [_step(self.toolbox, s, sorted(deps.get(s.id, ()))) for s in chain.steps],
            "tools": [self.toolbox.get(t).describe() for t in sorted(tools)],
            "context_schema": context_schema(chain, self.toolbox),
            "definition": chain.to_dict(),
        }


def chain_summary(chain: Chain) -> dict[str, Any]:
    """A chain as listed: name, description, number of steps, tools used."""
    return {"name": chain.name, "description": chain.description.strip(),
            "step_count": len(chain.steps),
            "uses": sorted({s.tool for s in chain.steps})}


def _step(toolbox: Toolbox, step: Any, depends_on: list[str]) -> dict[str, Any]:
    tool = toolbox.get(step.tool) if step.tool in toolbox else None
    if step.confirm is not None:
        confirm: Any = step.confirm
    elif tool is not None:
        confirm = "depends on args" if callable(tool.requires_confirmation) \
            else tool.requires_confirmation
    else:
        confirm = False
    return {"id": step.id, "tool": step.tool, "depends_on": depends_on,
            "side_effects": bool(tool and tool.side_effects),
            "idempotent": bool(tool and tool.idempotent),
            "confirm": confirm, "save_as": step.save_as}


def context_schema(chain: Chain, toolbox: Toolbox) -> dict[str, Any]:
    """The JSON Schema of the context ``chain`` reads: one required property per key its
    steps reference (``{{ context.KEY... }}``). A key passed whole as a tool's argument
    (``amount: "{{ context.amount }}"``) takes that argument's schema; any other use
    accepts any JSON value. Each property's description says where it is used. A chain that
    declares its ``inputs`` has their schema (:func:`chainlab.plan.inputs.inputs_json_schema`).
    """
    declared = inputs_json_schema(chain)
    if declared is not None:
        return declared
    props: dict[str, dict[str, Any]] = {}
    uses: dict[str, list[str]] = {}
    for step in chain.steps:
        tool = toolbox.get(step.tool) if step.tool in toolbox else None
        arg_schemas = tool.input_schema().get("properties", {}) if tool is not None else {}
        fields: list[tuple[str, Any]] = [(f"args.{k}", v) for k, v in step.args.items()]
        if step.when is not None:
            fields.append(("when", step.when))
        for field, value in fields:
            for key, whole in _context_keys(value, field == "when"):
                uses.setdefault(key, []).append(f"{step.id}.{field}")
                arg = field.removeprefix("args.")
                if whole and field != "when" and arg in arg_schemas and key not in props:
                    schema = {k: v for k, v in arg_schemas[arg].items()
                              if k not in ("title", "default")}
                    props[key] = schema
                props.setdefault(key, {})
    for key, schema in props.items():
        schema["description"] = "used by " + ", ".join(uses[key])
    return {"type": "object", "properties": props, "required": sorted(props),
            "additionalProperties": True}


def _context_keys(value: Any, condition: bool) -> list[tuple[str, bool]]:
    """``(key, passed whole)`` for each context key a value (or a ``when``) references."""
    whole = None
    try:
        if condition:
            refs = list(iter_refs(parse_condition(value)))
        elif isinstance(value, str) and is_template(value):
            template = parse_template(value)
            refs, whole = list(template.refs), template.whole
        else:
            refs = list(value_refs(value))
    except TemplateSyntaxError:
        return []  # (validation reports it)
    return [(ref.path[0], ref is whole and len(ref.path) == 1) for ref in refs
            if ref.root == "context" and ref.path and isinstance(ref.path[0], str)]


def validation(text: str, fmt: str, toolbox: Toolbox,
               context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``POST /chains/validate``: ``{valid, chain, step_count, problems}`` where problems
    are every problem the plan layer finds (syntax with lines, structure, tools, args),
    each as :func:`~chainlab.http.errors.problem_dict`."""
    try:
        chain = Chain.from_json(text) if fmt == "json" else Chain.from_yaml(text)
    except PlanError as exc:
        return {"valid": False, "chain": exc.chain_name, "step_count": None,
                "problems": [problem_dict(p) for p in exc.problems]}
    problems = chain.problems(toolbox, context=dict(context) if context is not None else None)
    return {"valid": not problems, "chain": chain.name, "step_count": len(chain.steps),
            "problems": [problem_dict(p) for p in problems]}
