"""The plan contract: the :class:`Chain` a person writes in YAML or an LLM produces, with the
parts it is made of (:mod:`chainlab.plan.parts`: Step, RetryPolicy, Rollback, RunOptions).

Every model is strict (``extra="forbid"``) and every field is documented;
``Chain.json_schema()`` exports them. The chain's methods are thin: loading and dumping are
in :mod:`chainlab.plan.io`, the checks in :mod:`chainlab.plan.validate`, the declared
``inputs`` and the selected ``output`` in :mod:`chainlab.plan.inputs`, the graph in
:mod:`chainlab.plan.graph`, the schema for a toolbox in :mod:`chainlab.plan.jsonschema`.
Those modules never import this one (``io`` is handed the class it builds), so the imports
read top-down: parts < io, graph, validate, jsonschema < schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chainlab.errors import PlanError, Problem, UnknownChainStepError
from chainlab.events.status import ErrorKind
from chainlab.plan.graph import dependencies
from chainlab.plan.io import dump_yaml, load_data, load_text
from chainlab.plan.jsonschema import chain_json_schema
from chainlab.plan.parts import (
    CHAIN_NAME_PATTERN,
    STEP_ID_PATTERN,
    ChainData,
    Input,
    RetryPolicy,
    Rollback,
    RunOptions,
    Step,
)
from chainlab.plan.refs import TemplateSyntaxError
from chainlab.plan.validate import find_problems, raise_for_problems

if TYPE_CHECKING:
    from chainlab.plan.toolbox_fit import ToolSource

__all__ = [
    "CHAIN_NAME_PATTERN",
    "STEP_ID_PATTERN",
    "Chain",
    "ErrorKind",
    "Input",
    "RetryPolicy",
    "Rollback",
    "RunOptions",
    "Step",
]


class Chain(ChainData):
    """A plan: named steps forming a DAG. Load with :meth:`from_yaml` / :meth:`from_json`.
    Its fields are :class:`~chainlab.plan.parts.ChainData`'s: ``name``, ``description``,
    ``inputs``, ``steps``, ``output`` and ``options``."""

    # ------------------------------------------------------------------ loading / dumping
    @classmethod
    def from_yaml(cls, text: str) -> Chain:
        """Parse YAML. Raises :class:`chainlab.PlanError` (with line numbers) on any problem."""
        return load_text(text, "yaml", cls)

    @classmethod
    def from_json(cls, text: str) -> Chain:
        """Parse JSON. Raises :class:`chainlab.PlanError` (with line numbers) on any problem."""
        return load_text(text, "json", cls)

    @classmethod
    def from_dict(cls, data: Any) -> Chain:
        """Build from plain data. Raises :class:`chainlab.PlanError` on any problem."""
        return load_data(data, cls)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; fields left at their defaults are omitted."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def to_yaml(self) -> str:
        """YAML text that :meth:`from_yaml` turns back into an equal chain."""
        return dump_yaml(self.to_dict())

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(exclude_defaults=True, indent=indent)

    @classmethod
    def json_schema(cls, toolbox: ToolSource | None = None) -> dict[str, Any]:
        """JSON Schema of a plan; with a toolbox, ``tool`` and ``args`` are restricted to its
        tools and their input schemas (what the LLM planner asks a model for)."""
        return chain_json_schema(cls, toolbox)

    # ------------------------------------------------------------------ graph / checks
    def step(self, step_id: str) -> Step:
        """The step with that id.

        Raises :class:`~chainlab.errors.UnknownChainStepError` (a ``KeyError`` too) with a
        did-you-mean and, when there are few, the chain's step ids.
        """
        for s in self.steps:
            if s.id == step_id:
                return s
        raise UnknownChainStepError(step_id, self.step_ids, chain_name=self.name)

    @property
    def step_ids(self) -> list[str]:
        return [s.id for s in self.steps]

    def dependencies(self) -> dict[str, set[str]]:
        """``{step_id: set of step ids}``: explicit ``depends_on`` UNION the dependencies
        derived from references in ``args`` and ``when``. Raises PlanError on a bad template."""
        try:
            return dependencies(self)
        except TemplateSyntaxError:
            bad = [
                p
                for p in find_problems(self, None)
                if p.code in ("bad_template", "bad_condition")
                and not (p.field or "").startswith("rollback.")
            ]
            raise PlanError(bad, chain_name=self.name) from None

    def validate(  # type: ignore[override]
        self, toolbox: ToolSource | None = None, *, context: dict[str, Any] | None = None
    ) -> Chain:
        """Check everything; raise one :class:`chainlab.PlanError` listing ALL problems.

        Without a toolbox only the structure is checked (ids, graph, templates, references).
        With ``context``, references to missing context keys are problems too. Returns self.
        """
        raise_for_problems(self, toolbox, context=context)
        return self

    def problems(
        self, toolbox: ToolSource | None = None, *, context: dict[str, Any] | None = None
    ) -> list[Problem]:
        """Like :meth:`validate` but returns the problem list instead of raising."""
        return find_problems(self, toolbox, context=context)

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # Deliberate upward import, inside the method only: Jupyter finds a rich display on
        # the object itself, and a plan that draws itself is worth more than a pure layer
        # diagram here. The contract layer never imports chainlab.render at import time.
        from chainlab.render import chain_mimebundle

        return chain_mimebundle(self)
