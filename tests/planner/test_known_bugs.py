"""Regression tests for bugs found outside chainlab/planner while building it."""

from __future__ import annotations

import pytest

from chainlab import Chain

from .conftest import Project, valid_plan


def test_chain_json_schema_accepts_references_to_non_string_params(project: Project) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    plan = valid_plan()  # estimate.tasks = "{{ steps.draft.output.tasks }}" (a list param)
    Chain.from_dict(plan).validate(project.toolbox)  # a valid plan ...
    jsonschema.validate(plan, Chain.json_schema(project.toolbox))  # ... must fit its schema
