"""The planner's schema and prompt carry declared inputs and the selected output (issue 29,
item 4b): a model may declare a chain's inputs and output, and a sub-chain's args are its
declared inputs."""

from __future__ import annotations

import json

import pytest

from chainlab import Chain
from chainlab.planner.policy import PlanPolicy, model_schema, sanitize_model_plan
from chainlab.planner.prompts import chat_messages

from .conftest import Project, valid_plan

SUB = {
    "name": "mail-team",
    "description": "mails the team",
    "inputs": {"body": {"type": "string", "description": "what to say"},
               "to": {"type": "string", "default": "team@example.com"}},
    "steps": [{"id": "send", "tool": "send_email",
               "args": {"to": "{{ context.to }}", "body": "{{ context.body }}"}}],
    "output": "{{ steps.send.output }}",
}


def test_the_model_schema_lets_a_plan_declare_inputs_and_output(project: Project) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = model_schema(project.toolbox, PlanPolicy())
    assert {"inputs", "output"} <= set(schema["properties"])
    plan = valid_plan()
    plan["inputs"] = {"goal": {"type": "string", "description": "what to build"}}
    plan["steps"][0]["args"]["goal"] = "{{ context.goal }}"
    plan["output"] = "{{ steps.estimate.output }}"
    jsonschema.validate(plan, schema)
    bad = json.loads(json.dumps(plan))
    bad["inputs"]["goal"]["type"] = "text"  # not a JSON Schema type
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    chain, notes = sanitize_model_plan(Chain.from_dict(plan), PlanPolicy())
    assert notes == [] and chain.inputs is not None and chain.output == plan["output"]


def test_a_subchain_step_is_offered_with_its_declared_inputs(project: Project) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    project.toolbox.add_chain(Chain.from_dict(SUB))
    schema = model_schema(project.toolbox, PlanPolicy())
    variant = next(v for v in schema["$defs"]["Step"]["anyOf"]
                   if v["properties"]["tool"].get("const") == "chain:mail-team")
    args = variant["properties"]["args"]
    assert args["required"] == ["body"] and args["additionalProperties"] is False
    assert set(args["properties"]) == {"body", "to"}
    step = {"id": "m", "tool": "chain:mail-team", "args": {"body": "hi"}}
    jsonschema.validate({"name": "p", "steps": [step]}, schema)
    with pytest.raises(jsonschema.ValidationError):  # an arg the sub-chain does not declare
        jsonschema.validate({"name": "p", "steps": [{**step, "args": {"body": "x", "cc": 1}}]},
                            schema)
    system = chat_messages("mail the team", project.toolbox, None, PlanPolicy())[0]["content"]
    assert '"args":{"body":"string, required: what to say","to":"string, default ' \
           "'team@example.com'\"}" in system
    assert '"output"' in system and '"inputs"' in system
