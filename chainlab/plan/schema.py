"""The plan contract: pydantic models for Chain, Step, RetryPolicy, Rollback, RunOptions.

These are what a person writes in YAML or an LLM produces, so they are strict
(``extra="forbid"``) and every field is documented; ``Chain.json_schema()`` exports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, field_validator

from chainlab.events.status import ErrorKind

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = [
    "STEP_ID_PATTERN",
    "Chain",
    "ErrorKind",
    "RetryPolicy",
    "Rollback",
    "RunOptions",
    "Step",
]

STEP_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
CHAIN_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
# roots of references, and words of the condition grammar (a bare {{ KEY }} must parse)
RESERVED_KEYS = frozenset(
    {
        "context",
        "steps",
        "memory",
        "input",
        "output",
        "and",
        "or",
        "not",
        "in",
        "true",
        "false",
        "null",
        "none",
    }
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=False)


class RetryPolicy(_Model):
    """How a step's failed attempts are retried (``max_attempts`` counts the first one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: Annotated[int, Field(ge=1, le=100)] = 2
    backoff: Literal["fixed", "exponential"] = "fixed"
    delay_s: Annotated[float, Field(ge=0, le=3600)] = 0.5
    max_delay_s: Annotated[float, Field(ge=0, le=86400)] = 30.0
    retry_on: tuple[ErrorKind, ...] = (
        ErrorKind.EXECUTION_FAILED,
        ErrorKind.TRANSIENT,
        ErrorKind.TIMEOUT,
    )

    @field_validator("retry_on")
    @classmethod
    def _no_permanent(cls, v: tuple[ErrorKind, ...]) -> tuple[ErrorKind, ...]:
        if ErrorKind.PERMANENT in v or ErrorKind.CANCELLED in v:
            raise ValueError("'permanent' and 'cancelled' errors are never retried")
        return v

    def delay(self, failed_attempt: int) -> float:
        """Back-off before the attempt that follows attempt number ``failed_attempt``."""
        if self.backoff == "fixed":
            return min(self.delay_s, self.max_delay_s)
        return min(self.delay_s * (2 ** (failed_attempt - 1)), self.max_delay_s)



class Rollback(_Model):
    """A compensation: call ``tool`` with ``args`` to undo a completed step.

    ``args`` may reference the step's resolved input (``{{ input.x }}``) and its output
    (``{{ output.y }}``), as well as ``context`` and ``memory``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    args: dict[str, JsonValue] = Field(default_factory=dict)
    retry: RetryPolicy | None = None
    timeout_s: Annotated[float, Field(gt=0)] | None = None


class Step(_Model):
    """One tool call in a chain."""

    id: Annotated[str, Field(pattern=STEP_ID_PATTERN, max_length=100)]
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    description: str = ""
    depends_on: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list)
    args: dict[str, JsonValue] = Field(default_factory=dict)
    save_as: Annotated[str, Field(pattern=KEY_PATTERN, max_length=100)] | None = None
    when: Annotated[str, Field(min_length=1)] | None = None
    retry: RetryPolicy | None = None
    timeout_s: Annotated[float, Field(gt=0, le=86400)] | None = None
    rollback: Literal["none"] | Rollback | None = None
    confirm: bool | None = None

    @field_validator("save_as")
    @classmethod
    def _not_reserved(cls, v: str | None) -> str | None:
        if v is not None and v.lower() in RESERVED_KEYS:
            raise ValueError(f"{v!r} is reserved for references; choose another key")
        return v

    @property
    def is_subchain(self) -> bool:
        return self.tool.startswith("chain:")

    @property
    def subchain_name(self) -> str | None:
        return self.tool[len("chain:") :].strip() if self.is_subchain else None


class RunOptions(_Model):
    """How a run executes. A chain carries defaults; ``runtime.start(options=...)`` overrides
    the fields it sets."""

    max_concurrency: Annotated[int, Field(ge=1, le=100_000)] = 8
    mode: Literal["parallel", "sequential"] = "parallel"
    on_failure: Literal["fail_fast", "continue"] = "fail_fast"
    rollback_mode: Literal["best_effort", "strict"] = "best_effort"
    compensate_on_failure: bool = True
    pools: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    breakpoints: list[str] = Field(default_factory=list)
    default_retry: RetryPolicy | None = None
    default_timeout_s: Annotated[float, Field(gt=0)] | None = None
    # release order among ready steps: "critical_path" = longest estimated remaining path
    # first (ties by declaration order); "auto" = critical_path once durations are known
    priority: Literal["auto", "declaration", "critical_path"] = "auto"

    def merged(self, override: RunOptions | None) -> RunOptions:
        """These options with the fields that ``override`` set explicitly replaced."""
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: getattr(override, k) for k in override.model_fields_set})
        return RunOptions.model_validate(data)


class Chain(_Model):
    """A plan: named steps forming a DAG. Load with :meth:`from_yaml` / :meth:`from_json`."""

    # the YAML/JSON text it was loaded from, so validate() can point problems at lines
    _source: str | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Equal when the plans are equal, wherever (and whether) they were loaded from."""
        if not isinstance(other, Chain):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pydantic model

    name: Annotated[str, Field(pattern=CHAIN_NAME_PATTERN, max_length=100)]
    description: str = ""
    steps: list[Step] = Field(default_factory=list)
    options: RunOptions = Field(default_factory=RunOptions)

    # ------------------------------------------------------------------ loading / dumping
    @classmethod
    def from_yaml(cls, text: str) -> Chain:
        """Parse YAML. Raises :class:`chainlab.PlanError` (with line numbers) on any problem."""
        from chainlab.plan.io import load_text

        return load_text(text, "yaml")

    @classmethod
    def from_json(cls, text: str) -> Chain:
        """Parse JSON. Raises :class:`chainlab.PlanError` (with line numbers) on any problem."""
        from chainlab.plan.io import load_text

        return load_text(text, "json")

    @classmethod
    def from_dict(cls, data: Any) -> Chain:
        """Build from plain data. Raises :class:`chainlab.PlanError` on any problem."""
        from chainlab.plan.io import load_data

        return load_data(data)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; fields left at their defaults are omitted."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def to_yaml(self) -> str:
        """YAML text that :meth:`from_yaml` turns back into an equal chain."""
        from chainlab.plan.io import dump_yaml

        return dump_yaml(self.to_dict())

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(exclude_defaults=True, indent=indent)

    @classmethod
    def json_schema(cls, toolbox: Toolbox | None = None) -> dict[str, Any]:
        """JSON Schema of a plan; with a toolbox, ``tool`` and ``args`` are restricted to its
        tools and their input schemas (what the LLM planner asks a model for)."""
        from chainlab.plan.jsonschema import chain_json_schema

        return chain_json_schema(toolbox)

    # ------------------------------------------------------------------ graph / checks
    def step(self, step_id: str) -> Step:
        """The step with that id.

        Raises :class:`~chainlab.errors.UnknownChainStepError` (a ``KeyError`` too) with a
        did-you-mean and, when there are few, the chain's step ids.
        """
        for s in self.steps:
            if s.id == step_id:
                return s
        from chainlab.errors import UnknownChainStepError

        raise UnknownChainStepError(step_id, self.step_ids, chain_name=self.name)

    @property
    def step_ids(self) -> list[str]:
        return [s.id for s in self.steps]

    def dependencies(self) -> dict[str, set[str]]:
        """``{step_id: set of step ids}``: explicit ``depends_on`` UNION the dependencies
        derived from references in ``args`` and ``when``. Raises PlanError on a bad template."""
        from chainlab.errors import PlanError
        from chainlab.plan.graph import dependencies
        from chainlab.plan.refs import TemplateSyntaxError

        try:
            return dependencies(self)
        except TemplateSyntaxError:
            from chainlab.plan.validate import find_problems

            bad = [
                p
                for p in find_problems(self, None)
                if p.code in ("bad_template", "bad_condition")
                and not (p.field or "").startswith("rollback.")
            ]
            raise PlanError(bad, chain_name=self.name) from None

    def validate(  # type: ignore[override]
        self, toolbox: Toolbox | None = None, *, context: dict[str, Any] | None = None
    ) -> Chain:
        """Check everything; raise one :class:`chainlab.PlanError` listing ALL problems.

        Without a toolbox only the structure is checked (ids, graph, templates, references).
        With ``context``, references to missing context keys are problems too. Returns self.
        """
        from chainlab.plan.validate import raise_for_problems

        raise_for_problems(self, toolbox, context=context)
        return self

    def problems(
        self, toolbox: Toolbox | None = None, *, context: dict[str, Any] | None = None
    ) -> list[Any]:
        """Like :meth:`validate` but returns the problem list instead of raising."""
        from chainlab.plan.validate import find_problems

        return find_problems(self, toolbox, context=context)

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # Deliberate upward import, inside the method only: Jupyter finds a rich display on
        # the object itself, and a plan that draws itself is worth more than a pure layer
        # diagram here. The contract layer never imports chainlab.render at import time.
        from chainlab.render import chain_mimebundle

        return chain_mimebundle(self)
