"""The designer's edits as functions of the draft: each returns the new draft data (or
None when nothing changes) and writes nothing; :class:`~.widget.ChainDesigner` writes it
through the draft's one pipeline (:meth:`~.draft.Draft.write`). Renaming a step renames the
references to it too (in args, ``when`` conditions and rollback args).

Every function raises DesignerError for an edit that cannot apply (an unknown step or field,
a taken or malformed id); plan problems are never raised, they are the draft's problems.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from chainlab._text import did_you_mean
from chainlab.jupyter.designer.draft import STEP_FIELDS, DesignerError, Draft

__all__ = ["add_step", "neighbour", "remove_step", "rename_condition", "rename_step",
           "rename_value", "set_arg", "set_name", "unset_arg", "update_step"]

Data = dict[str, Any]
_BRACES = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_QUOTED = r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\""


def add_step(draft: Draft, tool: str, step_id: str | None, args: Mapping[str, Any] | None,
             depends_on: Iterable[str] | None, save_as: str | None,
             when: str | None) -> tuple[str, Data]:
    """A step calling ``tool`` appended (id: the tool's name made unique, by default)."""
    if not isinstance(tool, str) or not tool:
        raise DesignerError(f"add_step needs the name of a tool (text), got {tool!r}; "
                            "e.g. designer.add_step('fetch')")
    step_id = draft.fresh_id(tool) if step_id is None else step_id
    draft.check_new_id(step_id)
    data, steps = draft.edited()
    steps.append({"id": step_id, "tool": tool, "depends_on": list(depends_on or []),
                  "args": copy.deepcopy(dict(args or {})), "save_as": save_as,
                  "when": when})
    return step_id, data


def update_step(draft: Draft, step_id: str, fields: Mapping[str, Any]) -> Data:
    """Fields of a step set (``None`` resets one to its default)."""
    unknown = [k for k in fields if k not in STEP_FIELDS]
    if unknown:
        raise DesignerError(f"a step has no field {unknown[0]!r}"
                            f"{did_you_mean(unknown[0], STEP_FIELDS)}")
    i = draft.index(step_id)
    data, steps = draft.edited()
    for key, value in fields.items():
        if value is None:
            steps[i].pop(key, None)
        else:
            steps[i][key] = copy.deepcopy(value)
    return data


def set_arg(draft: Draft, step_id: str, name: str, value: Any) -> Data:
    """One argument of a step set (a literal or a reference)."""
    i = draft.index(step_id)
    data, steps = draft.edited()
    args = steps[i].get("args")
    steps[i]["args"] = {**(args if isinstance(args, dict) else {}), name: copy.deepcopy(value)}
    return data


def unset_arg(draft: Draft, step_id: str, name: str) -> Data | None:
    """One argument of a step left out; None when the step does not set it."""
    i = draft.index(step_id)
    data, steps = draft.edited()
    args = steps[i].get("args")
    if isinstance(args, dict) and name in args:
        del args[name]
        return data
    return None


def neighbour(draft: Draft, step_id: str) -> str | None:
    """The step that takes ``step_id``'s place in the list once it is removed."""
    i = draft.index(step_id)
    ids = [s for s in draft.step_ids if s != step_id]
    return ids[min(i, len(ids) - 1)] if ids else None


def remove_step(draft: Draft, step_id: str) -> Data:
    """A step removed, with the ``depends_on`` entries and breakpoints naming it; references
    to its output stay (they become ``unknown_reference`` problems)."""
    i = draft.index(step_id)
    data, steps = draft.edited()
    del steps[i]
    for step in steps:
        deps = step.get("depends_on")
        if isinstance(deps, list) and step_id in deps:
            step["depends_on"] = [d for d in deps if d != step_id]
    options = data.get("options")
    if isinstance(options, dict) and step_id in (options.get("breakpoints") or []):
        options["breakpoints"] = [b for b in options["breakpoints"] if b != step_id]
    return data


def rename_step(draft: Draft, old: str, new: str) -> Data | None:
    """A step renamed, with its ``depends_on`` entries, references (the chain's ``output``
    too) and breakpoints; None
    when ``new`` is its name already."""
    i = draft.index(old)
    if new == old:
        return None
    draft.check_new_id(new)
    data, steps = draft.edited()
    steps[i]["id"] = new
    for step in steps:
        deps = step.get("depends_on")
        if isinstance(deps, list):
            step["depends_on"] = [new if d == old else d for d in deps]
        if "args" in step:
            step["args"] = rename_value(step["args"], old, new)
        if isinstance(step.get("when"), str):
            step["when"] = rename_condition(step["when"], old, new)
        if isinstance(step.get("rollback"), dict):
            step["rollback"] = rename_value(step["rollback"], old, new)
    if "output" in data:  # the chain's selected output follows the step too
        data["output"] = rename_value(data["output"], old, new)
    options = data.get("options")
    if isinstance(options, dict) and isinstance(options.get("breakpoints"), list):
        options["breakpoints"] = [new if b == old else b for b in options["breakpoints"]]
    return data


def set_name(draft: Draft, name: str) -> Data:
    """The chain renamed (a name the plan refuses becomes a problem)."""
    data, _ = draft.edited()
    data["name"] = name
    return data


# ---------------------------------------------------------------------- renaming refs
def _rename_in_path(text: str, old: str, new: str) -> str:
    """``steps.OLD.output`` (or ``steps['OLD']``) -> ``steps.NEW...`` in reference text."""
    o = re.escape(old)
    text = re.sub(rf"(?<![\w.\-])steps\.{o}(?=\.output\b|\[)", f"steps.{new}", text)
    return re.sub(rf"(?<![\w.\-])steps\[\s*(['\"]){o}\1\s*\]", f"steps.{new}", text)


def rename_value(value: Any, old: str, new: str) -> Any:
    """A JSON value whose templates refer to ``new`` wherever they referred to ``old``."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        return _BRACES.sub(lambda m: _rename_in_path(m.group(0), old, new), value)
    if isinstance(value, dict):
        return {k: rename_value(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [rename_value(v, old, new) for v in value]
    return value


def rename_condition(text: str, old: str, new: str) -> str:
    """A ``when`` condition with its references renamed; quoted strings stay as they are."""
    parts = re.split(f"({_QUOTED})", text)
    return "".join(p if i % 2 else _rename_in_path(p, old, new) for i, p in enumerate(parts))
