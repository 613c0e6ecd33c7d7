"""The LLM planner's usage (issue 31): the tokens of every round the model was asked are
recorded once, on the last planning event, and counted in the run's usage."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chainlab.planner import plan_and_start
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import REQUEST, Project, planner_for, valid_plan

pytestmark = pytest.mark.anyio


async def test_the_planners_tokens_are_part_of_the_runs_usage(
    project: Project, fake: Callable[..., FakeOpenAI]
) -> None:
    server = fake(valid_plan())
    planner = planner_for(server)
    run = await plan_and_start(project.runtime(), planner, REQUEST, {"table_id": "t1"})
    report = planner.last_report
    assert report is not None
    [rnd] = report.rounds
    assert rnd.usage is not None and rnd.usage["prompt_tokens"] > 0
    usage = [e.payload.get("usage") for e in run.event_list() if e.kind.startswith("planning")]
    expected = {"input_tokens": rnd.usage["prompt_tokens"],
                "output_tokens": rnd.usage["completion_tokens"],
                "tokens": rnd.usage["prompt_tokens"] + rnd.usage["completion_tokens"],
                "models": ["fake-model"]}
    assert usage == [None, expected]  # planning_started carries none: counted once
    assert {k: run.state.usage[k] for k in expected} == expected
