"""YAML plan text: parsed with libyaml when PyYAML has it, aliases refused, values located
by line.

PyYAML's pure-Python loader is the fallback. Either way the loader refuses duplicate keys,
keeps dates as strings (plans are JSON data), and keeps the node tree so that problems can
name the line of the value they are about.
"""

from __future__ import annotations

from typing import Any

import yaml

from chainlab._text import safe_repr
from chainlab.errors import PlanError, Problem
from chainlab.plan.yamlerrors import DuplicateKeyError, explain

__all__ = ["C_LOADER", "LOADER", "PURE_LOADER", "Lines", "parse", "syntax_problem"]


def _construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in seen:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"duplicate key {safe_repr(key)} (first at line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        except TypeError:  # unhashable key: let the base constructor report it
            pass
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


def _plan_loader(base: type[Any]) -> type[Any]:
    """A safe loader on ``base`` that refuses duplicate keys and keeps dates as strings
    (JSON data only)."""
    loader: type[Any] = type(f"_Plan{base.__name__}", (base,), {})
    loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for ch, resolvers in base.yaml_implicit_resolvers.items()
    }
    loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    return loader


PURE_LOADER = _plan_loader(yaml.SafeLoader)
# libyaml parses and composes in C, many times faster than PyYAML's pure-Python scanner; its
# nodes carry the same marks, so problems still point at lines. The pure loader is the
# fallback when PyYAML was built without libyaml.
C_LOADER = _plan_loader(yaml.CSafeLoader) if getattr(yaml, "__with_libyaml__", False) else None
LOADER = C_LOADER or PURE_LOADER


def parse(text: str) -> tuple[Any, yaml.Node | None]:
    """The data of a YAML document and its node tree (for :class:`Lines`). Raises
    YAMLError, or PlanError (``bad_syntax``) for an alias."""
    loader = LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        # An alias makes the data a graph whose tree can be exponentially larger than the
        # text (9 anchors of 9 aliases each: 400 bytes, 387 million values), and every walk
        # of plan data is a tree walk. Plans never need one; refuse them.
        if "*" in text and _has_shared_node(node):
            raise PlanError(_alias_problem(text))
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def _has_shared_node(root: yaml.Node) -> bool:
    """True when a node is reachable twice (only an alias makes that happen)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return False


def _alias_problem(text: str) -> Problem:
    what = (
        "YAML aliases (*name, repeating the value anchored as &name) are not allowed in a plan"
    )
    fix = (
        "write the value out where it is needed, or pass it in the run context and "
        "refer to it as '{{ context.KEY }}'"
    )
    for event in yaml.parse(text, Loader=LOADER):
        if isinstance(event, yaml.AliasEvent) and event.start_mark is not None:
            line, col = event.start_mark.line + 1, event.start_mark.column + 1
            return Problem(
                "bad_syntax",
                f"alias *{event.anchor} at line {line}, column {col}: {what}; {fix}",
                line=line,
                column=col,
            )
    return Problem("bad_syntax", f"{what}; {fix}")  # pragma: no cover - a shared node is an alias


def syntax_problem(exc: yaml.YAMLError, text: str = "") -> Problem:
    """The ``bad_syntax`` problem of a YAML error in ``text``, in our own words, with its
    line and column when known (see :mod:`chainlab.plan.yamlerrors`)."""
    return explain(exc, text)


class Lines:
    """Lines of values in YAML/JSON text, by path (best effort). The text is composed once,
    on the first question, unless its node tree is handed over."""

    def __init__(self, text: str, node: yaml.Node | None = None):
        self.text = text
        self.node = node
        self.composed = node is not None

    def locate(self, path: tuple[Any, ...]) -> int | None:
        """1-based line of the value at ``path``: of its key in a mapping, of the deepest
        node found when the path goes further than the text."""
        if not self.composed:
            self.composed = True
            try:
                self.node = yaml.compose(self.text, Loader=LOADER)
            except Exception:
                self.node = None
        return _line_at(self.node, path)


def _line_at(node: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    if node is None:
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
