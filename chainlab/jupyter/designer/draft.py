"""The chain designer's draft: YAML text, the data it holds, the loaded chain and its
problems (pure Python, no widgets; :class:`chainlab.jupyter.ChainDesigner` exposes it).

One pipeline for every change: data is written as canonical YAML (text a person typed is kept
verbatim), loaded with ``Chain.from_yaml`` and checked with ``Chain.validate(toolbox,
context=...)``, so the problems are exactly the plan layer's.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import did_you_mean
from chainlab.errors import ChainlabError, PlanError, Problem
from chainlab.plan import yamltext
from chainlab.plan.graph import edges
from chainlab.plan.inputs import needed_inputs
from chainlab.plan.io import dump_yaml
from chainlab.plan.refs import TemplateSyntaxError, parse_template
from chainlab.plan.schema import STEP_ID_PATTERN, Chain, Step
from chainlab.tools import Toolbox

__all__ = ["STEP_FIELDS", "UNSET", "DesignerError", "Draft", "Reference", "type_name"]

STEP_FIELDS = tuple(Step.model_fields)  # declaration order: the YAML's key order
_STEP_ID = re.compile(STEP_ID_PATTERN)
UNSET = "\x00unset"  # a dropdown choice meaning "leave this field out"


class DesignerError(ChainlabError, ValueError):
    """An edit the designer cannot apply (unknown step, taken or malformed id, unknown
    field). Plan problems are never raised: they are listed in ``designer.problems``."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A reference an argument can use: ``source`` goes between ``{{ }}``."""

    source: str
    label: str
    step_id: str | None = None  # the step it makes the argument depend on
    # what it holds (None: unknown, fits anything); not part of what a reference is
    schema: dict[str, Any] | None = field(default=None, compare=False)


class Draft:
    """The data behind the designer: YAML text, the data it holds, the loaded chain and
    its problems. Pure Python (no widgets); ChainDesigner exposes it."""

    def __init__(self, toolbox: Toolbox, chain: Chain | None, name: str,
                 context: Mapping[str, Any] | None):
        self.toolbox = toolbox
        self.context: dict[str, Any] | None = dict(context) if context is not None else None
        self.seed = chain
        self.listeners: list[Callable[[str], None]] = []
        self.text = ""
        self.typed = False
        self.data: dict[str, Any] = {"name": name, "steps": []}
        self.parsed: Chain | None = None
        self.problems: list[Problem] = []
        self.last_valid: Chain | None = None
        self.revision = 0
        if chain is not None:
            self.data = chain.to_dict()
            self.load(chain.to_yaml())
        else:
            self.write(self.data, "init")

    # ------------------------------------------------------------------ the pipeline
    def load(self, text: str, origin: str = "init") -> None:
        """Make ``text`` the draft (verbatim), load and validate it, tell the listeners."""
        self.text = text
        self.typed = origin == "yaml"  # a person's text: kept until it loads
        try:
            parsed = Chain.from_yaml(text)
        except PlanError as exc:
            self.parsed, self.problems = None, list(exc.problems)
            raw = _raw_data(text)
            if raw is not None:
                self.data = raw
        else:
            self.parsed = parsed
            self.data = parsed.to_dict()
            self.problems = self.validate(parsed)
            if not self.problems:
                self.last_valid = self.seed if parsed == self.seed else parsed
        self.revision += 1
        for listener in list(self.listeners):
            listener(origin)

    def validate(self, chain: Chain) -> list[Problem]:
        try:
            chain.validate(self.toolbox, context=self.context)
        except PlanError as exc:
            return list(exc.problems)
        return []

    def write(self, data: dict[str, Any], origin: str) -> None:
        """Make ``data`` the draft: written as canonical YAML, then loaded. Raises
        DesignerError (and keeps the draft as it was) for data plan YAML cannot hold: an
        object, an integer too long for JSON, a list that contains itself."""
        if self.parsed is None and origin not in ("init", "yaml") and self.typed:
            raise DesignerError(
                "the YAML tab does not load (" + _first_problem(self.problems) + "); fix it "
                "there first: an edit here would replace the text you typed")
        data = _normalised(_writable(data))
        text = dump_yaml(data)
        self.data = data
        # canonical text (``5`` for a float field is written ``5.0``, as to_yaml does);
        # a draft that does not load is written as it is and load() says why
        with contextlib.suppress(PlanError):
            text = Chain.from_yaml(text).to_yaml()
        self.load(text, origin)

    def revalidate(self, origin: str = "api") -> None:
        self.load(self.text, origin)

    # ------------------------------------------------------------------ reading
    @property
    def chain(self) -> Chain | None:
        if self.parsed is None or self.problems:
            return None
        return self.seed if self.parsed == self.seed else self.parsed

    @property
    def verdict(self) -> str:
        """``"does not load"``, ``"N problem(s)"``, ``"valid plan · needs context: a, b"``
        (a run could not start with the context given) or ``"valid"``."""
        if self.parsed is None:
            return "does not load"
        n = len(self.problems)
        if n:
            return f"{n} problem{'s' if n != 1 else ''}"
        missing = self.missing_context()
        if missing:
            return "valid plan · needs context: " + ", ".join(missing)
        return "valid"

    @property
    def runnable(self) -> bool:
        """A run could start now: the draft validates, has steps, and the context has
        every key it refers to."""
        return self.chain is not None and bool(self.step_ids) and not self.missing_context()

    def context_keys(self) -> list[str]:
        """The context keys the draft takes: its declared inputs (in their order) when it
        declares them, else the keys it refers to, sorted."""
        if self.parsed is not None and self.parsed.inputs is not None:
            return list(self.parsed.inputs)
        return sorted(_context_keys(self.steps))

    def missing_context(self) -> list[str]:
        """The keys a run needs that the context does not have: the declared inputs that are
        required and have no default, else every key the draft refers to."""
        have = self.context or {}
        if self.parsed is not None and self.parsed.inputs is not None:
            return [k for k in needed_inputs(self.parsed) if k not in have]
        return [k for k in self.context_keys() if k not in have]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.data.get("steps") or [])

    @property
    def step_ids(self) -> list[str]:
        return [str(s.get("id", "")) for s in self.steps]

    def index(self, step_id: str) -> int:
        ids = self.step_ids
        if step_id not in ids:
            raise DesignerError(f"no step {step_id!r} in the draft{did_you_mean(step_id, ids)}")
        return ids.index(step_id)

    def step(self, step_id: str) -> dict[str, Any]:
        return copy.deepcopy(self.steps[self.index(step_id)])

    # ------------------------------------------------------------------ editing
    def edited(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        data = copy.deepcopy(self.data)
        steps = data.get("steps")
        if not isinstance(steps, list):
            steps = data["steps"] = []
        return data, steps

    def check_new_id(self, step_id: str) -> None:
        # fullmatch: ``$`` also matches before a trailing newline, which the plan refuses
        if not isinstance(step_id, str) or not _STEP_ID.fullmatch(step_id) \
                or len(step_id) > 100:
            raise DesignerError(f"step id {step_id!r} must be letters, digits, '_' or '-' "
                                "(at most 100)")
        if step_id in self.step_ids:
            raise DesignerError(f"the draft already has a step {step_id!r}")

    def fresh_id(self, tool: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_-]+", "_", tool.removeprefix("chain:")).strip("_") or "step"
        base = base[:90]
        taken = set(self.step_ids)
        if base not in taken:
            return base
        n = 2
        while f"{base}_{n}" in taken:
            n += 1
        return f"{base}_{n}"

    def downstream(self, step_id: str) -> set[str]:
        """Steps that depend on ``step_id``, directly or not (as drawn: lenient)."""
        if self.parsed is None:
            return set()
        succ: dict[str, set[str]] = {}
        for e in edges(self.parsed):
            succ.setdefault(e.source, set()).add(e.target)
        out: set[str] = set()
        todo = [step_id]
        while todo:
            for nxt in succ.get(todo.pop(), ()):
                if nxt not in out:
                    out.add(nxt)
                    todo.append(nxt)
        return out

    def references(self, step_id: str) -> list[Reference]:
        """What an argument of ``step_id`` can refer to: context keys, the outputs (and
        their fields) of steps that do not depend on it, save_as keys."""
        out: list[Reference] = []
        declared = self.parsed is not None and self.parsed.inputs is not None
        keys = set(self.context_keys()) if declared \
            else set(self.context or {}) | _context_keys(self.steps)
        out += [Reference(f"context.{k}", f"context.{k}") for k in sorted(keys)]
        later = self.downstream(step_id) | {step_id}
        for s in self.steps:
            other = str(s.get("id", ""))
            if other in later or not _STEP_ID.fullmatch(other):
                continue
            schema = _output_schema(self.toolbox, str(s.get("tool", "")))
            if s.get("for_each") is not None:  # its output: its instances' outputs, in order
                schema = {"type": "array", **({"items": schema} if schema else {})}
            kind = type_name(schema)
            out.append(Reference(f"steps.{other}.output",
                                 f"steps.{other}.output" + (f" · {kind}" if kind else ""), other,
                                 schema))
            defs = {"$defs": schema["$defs"]} if schema and "$defs" in schema else {}
            for name, sub in _properties(schema):
                out.append(Reference(f"steps.{other}.output.{name}",
                                     f"steps.{other}.output.{name} · {type_name(sub)}", other,
                                     {**sub, **defs}))
            key = s.get("save_as")
            if isinstance(key, str) and key:
                out.append(Reference(f"memory.{key}", f"memory.{key} (saved by {other})", other,
                                     schema))
        return self._item_references(step_id, out) + out

    def _item_references(self, step_id: str, refs: list[Reference]) -> list[Reference]:
        """A ``for_each`` step's own names, first: its item (``as``, default ``item``),
        typed by the items of the list it goes over, and ``index``."""
        step = next((s for s in self.steps if s.get("id") == step_id), None)
        source = whole_ref(step.get("for_each")) if step is not None else None
        if step is None or source is None:
            return []
        name = str(step.get("as") or "item")
        found = next((r.schema for r in refs if r.source == source), None)
        items = found.get("items") if isinstance(found, dict) else None
        return [Reference(name, f"{name} · each item of {source}"
                          + (f" · {type_name(items)}" if items else ""), None, items),
                Reference("index", "index · integer (the item's position)", None,
                          {"type": "integer"})]


def _first_problem(problems: list[Problem]) -> str:
    if not problems:
        return "it does not parse"
    p = problems[0]
    return (f"line {p.line}: " if p.line else "") + p.message


def _writable(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as plain JSON data, or DesignerError naming the value that is not."""
    try:
        return to_json_value(data)
    except NotJSONError as exc:
        raise DesignerError(f"cannot write this edit into the plan: {exc}") from None
    except RecursionError:
        raise DesignerError(f"cannot write this edit into the plan: {_cyclic(data)} contains "
                            "itself (or is nested too deeply); pass plain JSON data") from None


def _cyclic(data: dict[str, Any]) -> str:
    """Where a value that contains itself sits (``steps[1].args.n``), as far as a step's
    field."""
    for i, step in enumerate(data.get("steps") or []):
        for key, value in (step.items() if isinstance(step, dict) else ()):
            items = value.items() if isinstance(value, dict) and key == "args" else [(None, value)]
            for name, v in items:
                try:
                    to_json_value(v)
                except RecursionError:
                    return f"steps[{i}].{key}" + (f".{name}" if name else "")
                except NotJSONError:
                    pass
    return "a value"


def _normalised(data: dict[str, Any]) -> dict[str, Any]:
    """Steps with their keys in the Step's order; empty optional fields left out."""
    out = dict(data)
    steps = []
    for raw in data.get("steps") or []:
        if not isinstance(raw, dict):
            steps.append(raw)
            continue
        step = {k: raw[k] for k in STEP_FIELDS if k in raw and not _empty(raw[k])}
        step.update({k: v for k, v in raw.items() if k not in STEP_FIELDS})  # YAML names them
        steps.append(step)
    out["steps"] = steps
    return out


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _raw_data(text: str) -> dict[str, Any] | None:
    """The mapping a YAML text holds when it is a draft at all (a chain the model refuses:
    a bad id, a wrong type), as JSON data; None when it does not parse as one."""
    try:
        # the plan's loader: an alias (a YAML bomb) is refused before anything is expanded
        data, _ = yamltext.parse(text)
        data = json.loads(json.dumps(data, default=str))
    except Exception:  # YAMLError, PlanError (an alias), RecursionError, values JSON cannot hold
        return None
    if not isinstance(data, dict):
        return None
    steps = data.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return None
    return data


def _context_keys(steps: Iterable[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for step in steps:
        text = json.dumps([step.get("args"), step.get("when")])
        found |= set(re.findall(r"context\.([A-Za-z0-9_-]+)", text))
    return found


def whole_ref(value: Any) -> str | None:
    """The reference source when ``value`` is exactly one ``{{ ref }}``."""
    if not isinstance(value, str) or "{{" not in value:
        return None
    try:
        ref = parse_template(value).whole
    except TemplateSyntaxError:
        return None
    return ref.source if ref is not None else None


def _output_schema(toolbox: Toolbox, tool: str) -> dict[str, Any] | None:
    if tool not in toolbox:
        return None
    try:
        return toolbox.get(tool).output_schema()
    except Exception:  # a return annotation pydantic cannot describe
        return None


def _properties(schema: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    if not schema or schema.get("type") != "object":
        return []
    return [(k, v) for k, v in (schema.get("properties") or {}).items()
            if re.fullmatch(r"[A-Za-z0-9_-]+", k)]


def type_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"][:4])
    if "anyOf" in schema:
        return " | ".join(type_name(s) or "any" for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array":
        inner = type_name(schema.get("items"))
        return f"array of {inner}" if inner else "array"
    if isinstance(kind, str):
        return kind
    return schema.get("title", "") if "$ref" not in schema else "object"
