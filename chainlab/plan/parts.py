"""The parts of a plan: :class:`Step` with its :class:`RetryPolicy` and :class:`Rollback`, and
the :class:`RunOptions` a chain carries, plus the patterns and reserved words their fields
follow.

Leaf models (pydantic only): the loading, validation and schema modules import them, and the
:class:`~chainlab.plan.schema.Chain` that holds them imports those modules in turn.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from chainlab.events.status import ErrorKind

__all__ = [
    "FOR_EACH_LIMIT",
    "INDEX_NAME",
    "KEY_PATTERN",
    "RESERVED_KEYS",
    "STEP_ID_PATTERN",
    "Budget",
    "PlanModel",
    "RetryPolicy",
    "Rollback",
    "RunOptions",
    "Step",
]

STEP_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
#: at most this many instances per ``for_each`` step (a run-time list past it fails the step)
FOR_EACH_LIMIT = 10_000
#: the name a ``for_each`` step's args and ``when`` read the item's position with
INDEX_NAME = "index"
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
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


class PlanModel(BaseModel):
    """The base of every plan model: strict, because a person or an LLM writes them."""

    model_config = ConfigDict(extra="forbid", validate_default=False)


class RetryPolicy(PlanModel):
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


class Rollback(PlanModel):
    """A compensation: call ``tool`` with ``args`` to undo a completed step.

    ``args`` may reference the step's resolved input (``{{ input.x }}``) and its output
    (``{{ output.y }}``), as well as ``context`` and ``memory``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    args: dict[str, JsonValue] = Field(default_factory=dict)
    retry: RetryPolicy | None = None
    timeout_s: Annotated[float, Field(gt=0)] | None = None


class Step(PlanModel):
    """One tool call in a chain (or, with ``for_each``, one per item of a list known at run
    time: the step's instances ``ID[0]``, ``ID[1]``, ...)."""

    # ``as`` is a Python keyword: the field is ``as_`` in Python and ``as`` in YAML/JSON
    model_config = ConfigDict(extra="forbid", validate_default=False, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)

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
    # fan-out over a list known at run time: one whole reference ("{{ steps.split.output }}")
    for_each: Annotated[str, Field(min_length=1, max_length=1000)] | None = None
    # the name the args and `when` read each item with (default "item"; "index" is its
    # position)
    as_: Annotated[Annotated[str, Field(pattern=KEY_PATTERN, max_length=100)] | None,
                   Field(alias="as")] = None
    # at most this many of the step's instances in flight at once (under the run's cap)
    max_concurrency: Annotated[int, Field(ge=1, le=FOR_EACH_LIMIT)] | None = None

    @field_validator("save_as")
    @classmethod
    def _not_reserved(cls, v: str | None) -> str | None:
        if v is not None and v.lower() in RESERVED_KEYS:
            raise ValueError(f"{v!r} is reserved for references; choose another key")
        return v

    @property
    def item_name(self) -> str:
        """The name a ``for_each`` step's args and ``when`` read each item with."""
        return self.as_ or "item"

    @property
    def local_names(self) -> tuple[str, ...]:
        """The names bound per instance of a ``for_each`` step (none for another step)."""
        return () if self.for_each is None else (self.item_name, INDEX_NAME)

    @property
    def is_subchain(self) -> bool:
        return self.tool.startswith("chain:")

    @property
    def subchain_name(self) -> str | None:
        return self.tool[len("chain:") :].strip() if self.is_subchain else None


class Budget(PlanModel):
    """What a run may spend (issue 31). Before a step is released, what the run has spent
    plus the step's estimated usage (its calls' mean in this run, else its history's
    median) is compared with each limit; one that would be crossed suspends the run with a
    ``budget_exceeded`` decision for a person (raise the budget and continue, or stop). A
    running step is never interrupted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_cost: Annotated[float, Field(ge=0)] | None = None
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    max_duration_s: Annotated[float, Field(gt=0)] | None = None


class RunOptions(PlanModel):
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
    budget: Budget | None = None  # limits on cost, tokens and time (suspends, never kills)

    def merged(self, override: RunOptions | None) -> RunOptions:
        """These options with the fields that ``override`` set explicitly replaced."""
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: getattr(override, k) for k in override.model_fields_set})
        return RunOptions.model_validate(data)
