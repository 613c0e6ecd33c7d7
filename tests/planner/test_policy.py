"""PlanPolicy: what a model may set, the schema sent to it, and forced confirmation."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain
from chainlab.planner.policy import (
    PlanPolicy,
    model_schema,
    require_confirmation,
    sanitize_model_plan,
)

from .conftest import Project, valid_plan


def _plan(**step: Any) -> Chain:
    base = {"id": "mail", "tool": "send_email", "args": {"to": "a@b.c", "body": "b"}}
    return Chain.from_dict({"name": "p", "steps": [{**base, **step}]})


@pytest.mark.parametrize("field,value", [
    ("retry", {"max_attempts": 100, "delay_s": 3600}),
    ("timeout_s", 0.001),
])
def test_step_fields_are_dropped_unless_opened(field: str, value: Any) -> None:
    chain, notes = sanitize_model_plan(_plan(**{field: value}), PlanPolicy())
    assert getattr(chain.step("mail"), field) is None
    assert notes == [f"step 'mail': dropped {field} set by the model (not allowed by the policy)"]
    opened = PlanPolicy(model_step_fields=frozenset({field}))
    chain, notes = sanitize_model_plan(_plan(**{field: value}), opened)
    assert getattr(chain.step("mail"), field) is not None and notes == []


def test_rollback_and_confirm_false_are_never_taken_from_a_model() -> None:
    rb = {"tool": "send_email", "args": {"to": "x", "body": "y"}}
    chain, notes = sanitize_model_plan(_plan(rollback=rb, confirm=False), PlanPolicy())
    step = chain.step("mail")
    assert (step.rollback, step.confirm) == (None, None)
    assert notes == [
        "step 'mail': ignored confirm: false from the model (the tool's own confirmation "
        "rule applies)",
        "step 'mail': dropped rollback tool 'send_email' set by the model (rollback tools it "
        "may use: none)"]
    chain, notes = sanitize_model_plan(_plan(rollback="none"), PlanPolicy())
    assert chain.step("mail").rollback is None
    assert notes == ["step 'mail': ignored rollback: none from the model (the tool's declared "
                     "compensation stays)"]
    allowed = PlanPolicy(rollback_tools=frozenset({"send_email"}))
    chain, notes = sanitize_model_plan(_plan(rollback=rb), allowed)
    assert chain.step("mail").rollback is not None and notes == []


def test_options_are_dropped_except_the_allowed_ones() -> None:
    chain = Chain.from_dict({"name": "p", "steps": [], "options": {
        "mode": "sequential", "max_concurrency": 999, "breakpoints": [], "pools": {"llm": 2}}})
    clean, notes = sanitize_model_plan(chain, PlanPolicy())
    assert clean.options.model_fields_set == set()
    assert notes == ["dropped run options ['breakpoints', 'max_concurrency', 'mode', 'pools'] "
                     "set by the model (it may set none)"]
    clean, notes = sanitize_model_plan(chain, PlanPolicy(model_options=frozenset({"mode"})))
    assert clean.options.mode == "sequential" and clean.options.model_fields_set == {"mode"}
    assert clean.options.max_concurrency == 8


def test_policy_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"\['turbo'\] are not run options"):
        PlanPolicy(model_options=frozenset({"turbo"}))
    with pytest.raises(ValueError, match=r"\['rollback'\] cannot be opened to a model"):
        PlanPolicy(model_step_fields=frozenset({"rollback"}))
    with pytest.raises(ValueError, match=r"write unconfirmed_tools=\{'add_rows'\}"):
        PlanPolicy(unconfirmed_tools="add_rows")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        PlanPolicy(max_steps=0)
    assert PlanPolicy(unconfirmed_tools=["a"]).unconfirmed_tools == frozenset({"a"})  # type: ignore[arg-type]


def test_make_replaces_only_the_given_knobs() -> None:
    base = PlanPolicy(model_options=frozenset({"mode"}))
    assert PlanPolicy.make(base) is base
    made = PlanPolicy.make(base, confirm_side_effects=False, unconfirmed_tools=["x"])
    assert (made.confirm_side_effects, made.unconfirmed_tools, made.model_options) == \
        (False, frozenset({"x"}), frozenset({"mode"}))


def test_require_confirmation(project: Project) -> None:
    chain = Chain.from_dict(valid_plan())
    confirmed, notes = require_confirmation(chain, project.toolbox, PlanPolicy())
    assert [s.confirm for s in confirmed.steps] == [None, None, None, True]
    assert len(notes) == 1
    already = confirmed
    again, notes = require_confirmation(already, project.toolbox, PlanPolicy())
    assert again == already and notes == []
    off, notes = require_confirmation(chain, project.toolbox,
                                      PlanPolicy(confirm_side_effects=False))
    assert off is chain and notes == []


def test_model_schema_follows_the_policy(project: Project) -> None:
    schema = model_schema(project.toolbox, PlanPolicy())
    variants = schema["$defs"]["Step"]["anyOf"]
    for v in variants:
        assert {"retry", "timeout_s", "rollback"}.isdisjoint(v["properties"])
        assert v["properties"]["confirm"]["anyOf"][0] == {"const": True}
    assert "options" not in schema["properties"]
    opened = model_schema(project.toolbox, PlanPolicy(
        model_options=frozenset({"mode"}), model_step_fields=frozenset({"retry"}),
        rollback_tools=frozenset({"remove_rows"})))
    v = opened["$defs"]["Step"]["anyOf"][0]["properties"]
    assert "retry" in v and "timeout_s" not in v
    assert v["rollback"]["anyOf"][0]["properties"]["tool"] == {"enum": ["remove_rows"]}
    assert list(opened["properties"]["options"]["properties"]) == ["mode"]


def test_model_schema_accepts_wired_plans_and_rejects_unknown_tools(project: Project) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = model_schema(project.toolbox, PlanPolicy())
    jsonschema.validate(valid_plan(), schema)  # list args given as references fit
    bad = valid_plan()
    bad["steps"][0]["tool"] = "drop_database"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    smuggled = valid_plan()
    smuggled["options"] = {"max_concurrency": 1000}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(smuggled, schema)
