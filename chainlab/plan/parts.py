"""The parts of a plan: :class:`Step` with its :class:`RetryPolicy` and :class:`Rollback`, the
:class:`RunOptions` and declared :class:`Input` s a chain carries, plus the patterns and
reserved words their fields follow; and :class:`ChainData`, a chain's fields.

Leaf models (pydantic only): the loading, validation, graph and schema modules import them
and read a chain as :class:`ChainData`; :class:`~chainlab.plan.schema.Chain` (the data with
its methods: load, dump, validate, draw) imports those modules in turn, so none of them
imports it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    field_validator,
    model_validator,
)

from chainlab._text import safe_repr
from chainlab.events.status import ErrorKind
from chainlab.plan.policies import Policy

__all__ = [
    "AGENT_PREFIX",
    "CHAIN_NAME_PATTERN",
    "FOR_EACH_LIMIT",
    "INDEX_NAME",
    "JSON_TYPES",
    "KEY_PATTERN",
    "RESERVED_KEYS",
    "STEP_ID_PATTERN",
    "Budget",
    "ChainData",
    "Input",
    "PlanModel",
    "RetryPolicy",
    "Rollback",
    "RunOptions",
    "Step",
    "json_equal",
    "names_an_agent",
    "value_type",
]

#: a step's tool that is an agent: ``agent:NAME`` (``toolbox.add_agent`` registers agent
#: ``NAME`` as that tool, as ``chain:NAME`` names a sub-chain)
AGENT_PREFIX = "agent:"


def names_an_agent(tool: str | None) -> bool:
    """Whether a tool name (a step's, an attempt's) names an agent: ``agent:NAME``. What a
    view asks of a run's attempts before it reads any agent's turns (a run that never ran an
    agent loads nothing of the agent package)."""
    return tool is not None and tool.startswith(AGENT_PREFIX)

CHAIN_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
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
    # in a worker fleet (DESIGN §19), runs whose key (a template over the context, e.g.
    # "customer:{{ context.customer_id }}") resolves the same never run at the same time
    concurrency_key: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    # rules as data (DESIGN §21): who decides a call before a person is asked
    policies: list[Policy] = Field(default_factory=list)

    @field_validator("concurrency_key")
    @classmethod
    def _context_template(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from chainlab.plan.refs import parse_template

        template = parse_template(value)  # TemplateSyntaxError is a ValueError
        bad = [str(r) for r in template.refs if r.root != "context"]
        if bad:
            raise ValueError(f"concurrency_key may refer only to the context "
                             f"({{{{ context.NAME }}}}), not {', '.join(bad)}")
        return value

    def merged(self, override: RunOptions | None) -> RunOptions:
        """These options with the fields that ``override`` set explicitly replaced."""
        if override is None:
            return self
        data = self.model_dump()
        data.update({k: getattr(override, k) for k in override.model_fields_set})
        return RunOptions.model_validate(data)


# ============================================================================ inputs
JsonType = Literal["string", "integer", "number", "boolean", "array", "object", "null"]
JSON_TYPES: tuple[str, ...] = ("string", "integer", "number", "boolean", "array", "object",
                               "null")


class Input(PlanModel):
    """One declared input: a context key the chain reads (a sub-chain: an arg of its step).

    ``type``: a JSON Schema type name, or a list of them (None: any JSON value).
    ``required``: a run cannot start without it; by default an input is required unless it
    has a ``default``. An input that is neither given nor required nor defaulted is null.
    """

    type: JsonType | list[JsonType] | None = None
    description: str = ""
    default: JsonValue = None
    required: bool | None = None
    enum: list[JsonValue] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _explicit_null_default(self) -> Input:
        # ``default: null`` written out: the input is optional (and stays so when the chain is
        # dumped, which leaves a null default out)
        if "default" in self.model_fields_set and self.default is None and self.required is None:
            self.required = False
        return self

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None

    @property
    def types(self) -> tuple[str, ...] | None:
        if self.type is None:
            return None
        return (self.type,) if isinstance(self.type, str) else tuple(self.type)

    def type_text(self) -> str:
        """``string``, ``integer | null``, ``any``."""
        types = self.types
        return " | ".join(types) if types else "any"

    def json_schema(self) -> dict[str, Any]:
        """This input as a JSON Schema (what the planner and the designer are shown)."""
        out: dict[str, Any] = {}
        types = self.types
        if types:
            out["type"] = types[0] if len(types) == 1 else list(types)
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.description:
            out["description"] = self.description
        if self.default is not None:
            out["default"] = self.default
        return out

    def summary(self) -> str:
        """``string, required: who asks`` / ``integer, default 10``: one line for a person."""
        parts = [self.type_text() if self.enum is None
                 else "one of " + ", ".join(safe_repr(v) for v in self.enum)]
        if self.default is not None:
            parts.append(f"default {safe_repr(self.default)}")
        elif self.is_required:
            parts.append("required")
        else:
            parts.append("optional")
        return ", ".join(parts) + (f": {self.description}" if self.description else "")

    def misfit(self, value: Any) -> str | None:
        """Why ``value`` does not fit this input (None when it does). An input that is not
        required may be null (what it is when it is left out)."""
        if value is None and not self.is_required:
            return None
        types = self.types
        kind = value_type(value)
        if types and not (kind in types or (kind == "integer" and "number" in types)):
            return f"is {safe_repr(value)} ({kind}), but it is declared as {self.type_text()}"
        if self.enum is not None and not any(json_equal(value, v) for v in self.enum):
            allowed = ", ".join(safe_repr(v) for v in self.enum)
            return f"is {safe_repr(value)}, but it must be one of {allowed}"
        return None


def value_type(value: Any) -> str:
    """The JSON type name of a JSON value (a bool is ``boolean``, not ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values as JSON Schema's ``enum`` and ``const`` see it: numbers by
    their value (``1`` equals ``1.0``), but a boolean is never a number (``true`` is not
    ``1``, which Python's ``==`` says it is), and arrays and objects item by item."""
    kind_a, kind_b = value_type(a), value_type(b)
    numbers = ("integer", "number")
    if kind_a != kind_b and not (kind_a in numbers and kind_b in numbers):
        return False
    if kind_a == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind_a == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# ============================================================================ the chain
class ChainData(PlanModel):
    """A chain's fields: what loading, the checks, the graph and the views read. The
    :class:`~chainlab.plan.schema.Chain` a person uses is this data with its methods."""

    # the YAML/JSON text it was loaded from, so validate() can point problems at lines
    _source: str | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Equal when the plans are equal, wherever (and whether) they were loaded from."""
        if not isinstance(other, ChainData):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pydantic model

    name: Annotated[str, Field(pattern=CHAIN_NAME_PATTERN, max_length=100)]
    description: str = ""
    # the context keys the chain takes (None: any key, undeclared), see chainlab.plan.inputs
    inputs: dict[Annotated[str, Field(pattern=KEY_PATTERN, max_length=100)], Input] | None = None
    steps: list[Step] = Field(default_factory=list)
    # what a run gives: templates over step outputs (None: no selected output)
    output: JsonValue = None
    options: RunOptions = Field(default_factory=RunOptions)
