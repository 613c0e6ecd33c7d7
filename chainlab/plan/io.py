"""Loading plans from YAML/JSON/dicts with precise, located problems; dumping YAML.

No input, however malformed, escapes as anything but :class:`chainlab.PlanError`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

import yaml
from pydantic import ValidationError

import chainlab.plan.yamltext as yamltext
from chainlab._json import MAX_DEPTH, scalar_problem
from chainlab._text import did_you_mean, safe_repr
from chainlab.errors import PlanError, Problem
from chainlab.plan.parts import ChainData, RetryPolicy, Rollback, RunOptions, Step

__all__ = ["dump_yaml", "load_data", "load_text"]

C = TypeVar("C", bound=ChainData)  # the Chain class, handed in

_MAX_TEXT = 5_000_000  # a plan larger than this is a mistake, not a plan
_MAX_VALUES = 2_000_000  # values in plan data counted as a tree (10x a 50,000-step plan)


def load_text(text: str, fmt: Literal["yaml", "json"], chain_type: type[C]) -> C:
    """Parse plan text into a ``chain_type`` (the :class:`~chainlab.plan.schema.Chain` class,
    handed in by its own classmethods: this module never imports it). Raises PlanError
    (``bad_syntax`` with line and column, or ``invalid_field`` problems located by line)."""
    if not isinstance(text, str):
        raise PlanError(
            Problem("bad_syntax", f"expected plan text (str), got {type(text).__name__}")
        )
    if len(text) > _MAX_TEXT:
        raise PlanError(
            Problem("bad_syntax", f"plan text is {len(text)} characters; the limit is {_MAX_TEXT}")
        )
    with _gc_paused():
        return _load_text(text, fmt, chain_type)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan is loaded.

    Loading builds hundreds of thousands of containers (YAML nodes, dicts, models); each
    700 allocations start a collection, and the full ones walk the whole growing tree: 3x
    the time at 10,000 steps. The data has no reference cycles (aliases are refused), so
    collecting during the load finds nothing anyway.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load_text(text: str, fmt: Literal["yaml", "json"], chain_type: type[C]) -> C:
    node: yaml.Node | None = None
    try:
        if fmt == "json":
            data = json.loads(text)
        else:
            data, node = yamltext.parse(text)
    except json.JSONDecodeError as exc:
        raise PlanError(
            Problem(
                "bad_syntax",
                f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                line=exc.lineno,
                column=exc.colno,
            )
        ) from None
    except yaml.YAMLError as exc:
        raise PlanError(yamltext.syntax_problem(exc, text)) from None
    except RecursionError:
        raise PlanError(Problem("bad_syntax", "plan text is nested too deeply")) from None
    except PlanError:
        raise
    except Exception as exc:
        # ValueError (an integer longer than Python's int-to-str digit limit) and
        # OverflowError (a YAML "\U99999999" escape)
        raise PlanError(Problem("bad_syntax", f"invalid {fmt.upper()}: {exc}")) from None
    lines = yamltext.Lines(text, node)
    chain = load_data(data, chain_type, locate=lines.locate)
    chain._source = text
    return chain


# --------------------------------------------------------------------------- dict -> Chain

_TAG = re.compile(r"^([a-z_-]+\[.*\]|[A-Z]\w*|str|int|float|bool|none|list|dict)$")
_FIELDS = {  # + "chain": the fields of the chain type being loaded
    "step": set(Step.model_fields),
    "options": set(RunOptions.model_fields),
    "rollback": set(Rollback.model_fields),
    "retry": set(RetryPolicy.model_fields),
}


def load_data(data: Any, chain_type: type[C], *, locate: Any = None) -> C:
    """Validate plain data into a ``chain_type``; every field problem is reported at once."""
    try:
        return _load_data(data, chain_type, locate=locate)
    except RecursionError:  # a dict containing itself, deep nesting
        raise PlanError(
            Problem("invalid_field", "plan data is nested too deeply (or contains itself)")
        ) from None


def _load_data(data: Any, chain_type: type[C], *, locate: Any = None) -> C:
    problems: list[Problem] = []
    fields = {**_FIELDS, "chain": set(chain_type.model_fields)}
    locate = locate or (lambda path: None)
    if not isinstance(data, dict):
        got = "nothing" if data is None else f"{type(data).__name__} {safe_repr(data)}"
        raise PlanError(
            Problem(
                "invalid_field",
                f"a chain is a mapping with 'name' and 'steps'; got {got}",
                line=locate(()),
            )
        )
    scan = _Scan(locate)
    size = scan.walk(data, ())
    if size > _MAX_VALUES:
        raise PlanError(
            Problem(
                "invalid_field",
                f"plan data holds {size} values counting each shared value wherever it "
                f"appears; the limit is {_MAX_VALUES}",
            )
        )
    problems += scan.problems
    skip = scan.bad_paths  # already reported by the scan; pydantic would only say it again
    raw_steps = data.get("steps", [])
    top = {k: v for k, v in data.items() if k != "steps"}
    try:
        chain_type.model_validate({**top, "steps": []})
    except ValidationError as exc:
        problems += _problems(exc, data, (), None, locate, fields, skip)
    if not isinstance(raw_steps, list):
        problems.append(
            Problem(
                "invalid_field",
                f"'steps' must be a list of steps, got {safe_repr(raw_steps)}",
                field="steps",
                line=locate(("steps",)),
            )
        )
        raw_steps = []
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        try:
            steps.append(Step.model_validate(raw))
        except ValidationError as exc:
            step_id = (
                raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
            )
            problems += _problems(exc, raw, ("steps", i), step_id, locate, fields, skip)
    if problems:
        raise PlanError(_dedupe(problems), chain_name=_name(data))
    if "steps" in data:  # validated above: pydantic takes Step instances as they are
        data = {**data, "steps": steps}
    try:
        return chain_type.model_validate(data)
    except ValidationError as exc:  # pragma: no cover - per-part checks above cover all fields
        raise PlanError(_problems(exc, data, (), None, locate, fields),
                        chain_name=_name(data)) from None


def _name(data: dict[str, Any]) -> str | None:
    name = data.get("name")
    return name if isinstance(name, str) else None


class _Scan:
    """One walk over plan data: numbers that JSON text cannot hold (NaN, Infinity, integers
    beyond Python's int-to-str digit limit) and the size of the data as a tree."""

    def __init__(self, locate: Any):
        self.locate = locate
        self.problems: list[Problem] = []
        self.bad_paths: set[tuple[Any, ...]] = set()
        self._sizes: dict[int, int] = {}  # id of a dict/list -> its size; -1 while walked

    def walk(self, value: Any, path: tuple[Any, ...]) -> int:
        """The number of values in ``value`` counted as a tree. Raises RecursionError when
        the data contains itself or is nested too deeply."""
        if isinstance(value, dict | list):
            if len(path) >= MAX_DEPTH:
                self.flag(path, f"plan data is nested too deeply: more than {MAX_DEPTH} "
                                "levels, the limit of any value; flatten it")
                return 1
            # a dict from Python may share a value between places: size it once (linear),
            # but count it everywhere it appears (that is what every later walk will do)
            size = self._sizes.get(id(value))
            if size is not None:
                if size < 0:
                    raise RecursionError("plan data contains itself")
                return size
            self._sizes[id(value)] = -1
            size = 1
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                why = scalar_problem(key) if isinstance(key, str) else None
                if why is not None:
                    self.flag((*path, key), f"the key {safe_repr(key)} is {why}")
                size += self.walk(item, (*path, key))
            self._sizes[id(value)] = size
            return size
        why = scalar_problem(value)  # the value gate's rule (chainlab._json)
        if why is not None:
            self.flag(path, why if isinstance(value, int) else f"{safe_repr(value)} is {why}")
        return 1

    def flag(self, path: tuple[Any, ...], message: str) -> None:
        self.bad_paths.add(path)
        self.problems.append(
            Problem(
                "invalid_field",
                message,
                field=_dotted(path) or None,
                line=self.locate(path),
            )
        )


def _problems(
    exc: ValidationError,
    raw: Any,
    prefix: tuple[Any, ...],
    step_id: str | None,
    locate: Any,
    fields: dict[str, set[str]],
    skip: set[tuple[Any, ...]] = frozenset(),  # type: ignore[assignment]
) -> list[Problem]:
    out = []
    errors = exc.errors(include_url=False)
    literal_locs = {
        _untagged(e["loc"])
        for e in errors
        if any(t.startswith("literal[") for t in _tags(e["loc"]))
    }
    for err in errors:
        loc = _untagged(err["loc"])
        tags = _tags(err["loc"])
        value_at = _walk(raw, loc)
        # a union (e.g. rollback: 'none' | {...}): report only the branch the value chose
        if any(t.startswith("literal[") for t in tags) and isinstance(value_at, dict):
            continue
        if loc in literal_locs and err["type"] in ("model_type", "model_attributes_type"):
            continue  # not a mapping: the literal branch's message already says what fits
        if (*prefix, *loc) in skip:
            continue
        field = _dotted(loc)
        if loc and loc[0] == "rollback" and err["type"] == "literal_error":
            msg = (
                "rollback must be 'none' or a mapping with 'tool' and 'args', "
                f"got {safe_repr(value_at)}"
            )
        else:
            msg = _message(err, loc, prefix, fields)
        out.append(
            Problem(
                "invalid_field",
                msg,
                step_id=step_id,
                field=field or None,
                line=locate((*prefix, *loc)),
            )
        )
    return out


def _dotted(path: tuple[Any, ...]) -> str:
    """``steps.0.args.x``; a key that is not a string (a huge int from YAML) as its repr."""
    return ".".join(seg if isinstance(seg, str) else safe_repr(seg) for seg in path)


def _untagged(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(seg for seg in loc if not (isinstance(seg, str) and _TAG.match(seg)))


def _tags(loc: tuple[Any, ...]) -> list[str]:
    return [seg for seg in loc if isinstance(seg, str) and _TAG.match(seg)]


def _message(err: Any, loc: tuple[Any, ...], prefix: tuple[Any, ...],
             fields: dict[str, set[str]]) -> str:
    kind = err["type"]
    name = loc[-1] if loc else None
    if kind == "extra_forbidden":
        model = _model_name(loc[:-1], prefix)
        return f"unknown field {safe_repr(name)}{did_you_mean(name, fields.get(model, ()))}"
    if kind == "missing":
        return f"missing required field {safe_repr(name)}"
    if kind == "string_pattern_mismatch":
        rule = err.get("ctx", {}).get("pattern", "")
        return f"{safe_repr(err['input'])} does not match {rule} (letters, digits, '_' and '-')"
    msg = err["msg"]
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping, got {safe_repr(err['input'])}"
    return f"{msg} (got {safe_repr(err['input'])})" if "input" in err else msg


def _model_name(loc: tuple[Any, ...], prefix: tuple[Any, ...]) -> str:
    full = (*prefix, *loc)
    if not full:
        return "chain"
    if full[-1] == "options":
        return "options"
    if full[-1] == "rollback":
        return "rollback"
    if full[-1] in ("retry", "default_retry"):
        return "retry"
    if len(full) == 2 and full[0] == "steps":
        return "step"
    return ""


def _walk(value: Any, loc: tuple[Any, ...]) -> Any:
    for seg in loc:
        try:
            value = value[seg]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for p in problems:
        key = (p.code, p.step_id, p.field, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


# --------------------------------------------------------------------------- dumping


class _Dumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: _Dumper, data: str) -> yaml.ScalarNode:
    if "\x85" in data:  # PyYAML folds NEL inside plain/single-quoted scalars; "\N" survives
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    return dumper.represent_str(data)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(data: Any) -> str:
    """YAML for plan data: key order kept, readable block style."""
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
