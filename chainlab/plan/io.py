"""Loading plans from YAML/JSON/dicts with precise, located problems; dumping YAML.

No input, however malformed, escapes as anything but :class:`chainlab.PlanError`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from chainlab._text import did_you_mean
from chainlab.errors import PlanError, Problem
from chainlab.plan.schema import Chain, Rollback, RunOptions, Step

__all__ = ["dump_yaml", "load_data", "load_text"]

_MAX_TEXT = 5_000_000  # a plan larger than this is a mistake, not a plan


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and keeps dates as strings (JSON data only)."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        try:
            if key in seen:
                raise _DuplicateKey(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        except TypeError:  # unhashable key: let the base constructor report it
            pass
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_text(text: str, fmt: Literal["yaml", "json"]) -> Chain:
    """Parse plan text. Raises PlanError (``bad_syntax`` with line and column, or
    ``invalid_field`` problems located by line)."""
    if not isinstance(text, str):
        raise PlanError(
            Problem("bad_syntax", f"expected plan text (str), got {type(text).__name__}")
        )
    if len(text) > _MAX_TEXT:
        raise PlanError(
            Problem("bad_syntax", f"plan text is {len(text)} characters; the limit is {_MAX_TEXT}")
        )
    try:
        data = json.loads(text) if fmt == "json" else yaml.load(text, Loader=_Loader)
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
        raise PlanError(_yaml_problem(exc)) from None
    except RecursionError:
        raise PlanError(Problem("bad_syntax", "plan text is nested too deeply")) from None
    except Exception as exc:
        # Python's digit limit) and OverflowError (a YAML "\U99999999" escape)
        raise PlanError(Problem("bad_syntax", f"invalid {fmt.upper()}: {exc}")) from None
    chain = load_data(data, locate=lambda path: _locate(text, path))
    chain._source = text
    return chain


def _yaml_problem(exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = (
        f"{context}: {problem}"
        if context and isinstance(exc, yaml.MarkedYAMLError) and not isinstance(exc, _DuplicateKey)
        else problem
    )
    if mark is not None:
        line, col = mark.line + 1, mark.column + 1
        return Problem(
            "bad_syntax", f"invalid YAML: {what} (line {line}, column {col})", line=line, column=col
        )
    return Problem("bad_syntax", f"invalid YAML: {what}")


def _locate(text: str, path: tuple[Any, ...]) -> int | None:
    """1-based line of the value at ``path`` in YAML/JSON text (best effort)."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except Exception:
        return None
    line = None
    for seg in path:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if getattr(k, "value", None) == seg:
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(seg, int):
            node = node.value[seg] if 0 <= seg < len(node.value) else None
        else:
            node = None
    if node is not None:
        line = node.start_mark.line + 1
    return line


# --------------------------------------------------------------------------- dict -> Chain

_TAG = re.compile(r"^([a-z_-]+\[.*\]|[A-Z]\w*|str|int|float|bool|none|list|dict)$")
_FIELDS = {
    "chain": set(Chain.model_fields),
    "step": set(Step.model_fields),
    "options": set(RunOptions.model_fields),
    "rollback": set(Rollback.model_fields),
}


def load_data(data: Any, *, locate: Any = None) -> Chain:
    """Validate plain data into a Chain; every field problem is reported at once."""
    try:
        return _load_data(data, locate=locate)
    except RecursionError:  # a YAML alias to itself, a dict containing itself, deep nesting
        raise PlanError(
            Problem("invalid_field", "plan data is nested too deeply (or contains itself)")
        ) from None


def _load_data(data: Any, *, locate: Any = None) -> Chain:
    problems: list[Problem] = []
    locate = locate or (lambda path: None)
    if not isinstance(data, dict):
        got = "nothing" if data is None else f"{type(data).__name__} {_short(data)}"
        raise PlanError(
            Problem(
                "invalid_field",
                f"a chain is a mapping with 'name' and 'steps'; got {got}",
                line=locate(()),
            )
        )
    _check_numbers(data, (), problems, locate)
    raw_steps = data.get("steps", [])
    top = {k: v for k, v in data.items() if k != "steps"}
    try:
        Chain.model_validate({**top, "steps": []})
    except ValidationError as exc:
        problems += _problems(exc, data, (), None, locate)
    if not isinstance(raw_steps, list):
        problems.append(
            Problem(
                "invalid_field",
                f"'steps' must be a list of steps, got {_short(raw_steps)}",
                field="steps",
                line=locate(("steps",)),
            )
        )
        raw_steps = []
    for i, raw in enumerate(raw_steps):
        try:
            Step.model_validate(raw)
        except ValidationError as exc:
            step_id = (
                raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
            )
            problems += _problems(exc, raw, ("steps", i), step_id, locate)
    if problems:
        raise PlanError(_dedupe(problems), chain_name=_name(data))
    try:
        return Chain.model_validate(data)
    except ValidationError as exc:  # pragma: no cover - per-part checks above cover all fields
        raise PlanError(_problems(exc, data, (), None, locate), chain_name=_name(data)) from None


def _name(data: dict[str, Any]) -> str | None:
    name = data.get("name")
    return name if isinstance(name, str) else None


def _check_numbers(value: Any, path: tuple[Any, ...], problems: list[Problem], locate: Any) -> None:
    """JSON has no NaN/Infinity: refuse them where they appear."""
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(
            Problem(
                "invalid_field",
                f"{value!r} is not a JSON number",
                field=".".join(map(str, path)) or None,
                line=locate(path),
            )
        )
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, (*path, k), problems, locate)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(v, (*path, i), problems, locate)


def _problems(
    exc: ValidationError, raw: Any, prefix: tuple[Any, ...], step_id: str | None, locate: Any
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
        field = ".".join(str(s) for s in loc)
        if loc and loc[0] == "rollback" and err["type"] == "literal_error":
            msg = (
                "rollback must be 'none' or a mapping with 'tool' and 'args', "
                f"got {_short(value_at)}"
            )
        else:
            msg = _message(err, loc, raw, prefix)
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


def _untagged(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(seg for seg in loc if not (isinstance(seg, str) and _TAG.match(seg)))


def _tags(loc: tuple[Any, ...]) -> list[str]:
    return [seg for seg in loc if isinstance(seg, str) and _TAG.match(seg)]


def _message(err: Any, loc: tuple[Any, ...], raw: Any, prefix: tuple[Any, ...]) -> str:
    kind = err["type"]
    name = loc[-1] if loc else None
    if kind == "extra_forbidden":
        model = _model_name(loc[:-1], prefix)
        return f"unknown field {name!r}{did_you_mean(str(name), _FIELDS.get(model, ()))}"
    if kind == "missing":
        return f"missing required field {name!r}"
    if kind == "string_pattern_mismatch":
        rule = err.get("ctx", {}).get("pattern", "")
        return f"{_short(err['input'])} does not match {rule} (letters, digits, '_' and '-')"
    msg = err["msg"]
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping, got {_short(err['input'])}"
    return f"{msg} (got {_short(err['input'])})" if "input" in err else msg


def _model_name(loc: tuple[Any, ...], prefix: tuple[Any, ...]) -> str:
    full = (*prefix, *loc)
    if not full:
        return "chain"
    if full[-1] == "options":
        return "options"
    if full[-1] == "rollback":
        return "rollback"
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
