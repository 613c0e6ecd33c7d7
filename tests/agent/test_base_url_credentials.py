"""A credential in a model's base URL (user-info, or a query parameter named like a key) is
refused at every door, by ONE check (:func:`chainlab.agent.endpoint.check_base_url`), with a
message naming the safe way (the environment) that never holds the URL: a base URL is kept
with a run and shown wherever the run is, a key never is (issue 44: an Azure-style
``?api-key=sk-...`` was accepted, stored and printed by ``chainlab runs --json``)."""

from __future__ import annotations

import pytest

from chainlab import Agent, Chain
from chainlab.agent.adhoc import ADHOC_META, adhoc_agent, run_toolbox
from chainlab.agent.endpoint import Endpoint, credential_in
from chainlab.errors import CredentialInURLError
from chainlab.planner import OpenAIPlanner
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

from .conftest import Shop

pytestmark = pytest.mark.anyio

SECRET = "sk-never-kept-2718281828"


@pytest.mark.parametrize(("url", "found"), [
    (f"http://me:{SECRET}@127.0.0.1:9/v1", "user-info before '@'"),
    (f"http://{SECRET}@127.0.0.1:9/v1", "user-info before '@'"),
    (f"https://x.openai.azure.com/v1?api-version=2024-02-01&api-key={SECRET}",
     "the query parameter 'api-key'"),
    (f"http://gw/v1?API_KEY={SECRET}", "the query parameter 'API_KEY'"),
    (f"http://gw/v1?apikey={SECRET}", "the query parameter 'apikey'"),
    (f"http://gw/v1?Subscription-Key={SECRET}", "the query parameter 'Subscription-Key'"),
    (f"http://gw/v1?access_token={SECRET}", "the query parameter 'access_token'"),
    (f"http://gw/v1?client_secret={SECRET}", "the query parameter 'client_secret'"),
    (f"http://gw/v1?X-Amz-Signature={SECRET}", "the query parameter 'X-Amz-Signature'"),
    (f"http://gw/v1?sv=2022&sig={SECRET}", "the query parameter 'sig'"),
    (f"http://gw/v1?code={SECRET}", "the query parameter 'code'"),
    (f"http://gw/v1?Password={SECRET}", "the query parameter 'Password'"),
    (f"http://gw/v1?authorization=Bearer%20{SECRET}", "the query parameter 'authorization'"),
    (f"http://gw/v1?api%2Dkey={SECRET}", "the query parameter 'api-key'"),  # (encoded)
    (f"http://gw:port{SECRET}/v1", "a text that cannot be read as a URL, so it may hold one"),
    ("http://127.0.0.1:9/v1", None),
    ("https://x.openai.azure.com/openai/deployments/gpt?api-version=2024-02-01", None),
    ("http://gw/v1?model=m&region=eu", None),
])
def test_which_base_urls_carry_a_credential(url: str, found: str | None) -> None:
    assert credential_in(url) == found


def _refused(exc: pytest.ExceptionInfo[CredentialInURLError], where: str) -> None:
    err = exc.value
    assert err.where == where
    assert SECRET not in str(err) and SECRET not in repr(err.args)
    assert f"{where} carries a credential (" in err.message
    assert "OPENAI_API_KEY" in (err.hint or "")


URL = f"http://127.0.0.1:9/v1?api-key={SECRET}"


def test_an_agent_and_a_planner_refuse_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CredentialInURLError) as exc:
        Agent("support", "help", ["lookup"], model="m", base_url=URL)
    _refused(exc, "base_url")
    with pytest.raises(CredentialInURLError) as exc:
        OpenAIPlanner(model="m", base_url=URL)
    _refused(exc, "base_url")
    with pytest.raises(CredentialInURLError) as exc:
        Endpoint("m", URL)  # (made directly: the planner makes one per request)
    _refused(exc, "base_url")
    # from the environment: the same check, naming the variable
    monkeypatch.setenv("OPENAI_BASE_URL", URL)
    for make in (lambda: Agent("a", "help", model="m"), lambda: OpenAIPlanner(model="m")):
        with pytest.raises(CredentialInURLError) as exc:
            make()
        _refused(exc, "OPENAI_BASE_URL")


def test_an_adhoc_agent_refuses_it_at_the_front_ends_door(shop: Shop) -> None:
    # (checked before the scheme, whose message shows the URL)
    for url in (URL, f"ftp://h/v1?token={SECRET}"):
        with pytest.raises(CredentialInURLError) as exc:
            adhoc_agent(shop.toolbox, model="m", base_url=url)
        _refused(exc, "--base-url")


async def test_a_runs_adhoc_agent_with_one_is_refused_and_no_run_is_kept(shop: Shop) -> None:
    """A run's meta written by hand (or by an older chainlab) holding such a URL: restoring
    its agent is refused, and so is a new run (started or enqueued) with that meta."""
    meta = {ADHOC_META: {"name": "assistant", "instructions": "help", "tools": ["lookup"],
                         "model": "m", "base_url": URL}}
    with pytest.raises(CredentialInURLError) as exc:
        run_toolbox(shop.toolbox, meta, "r1")
    _refused(exc, "base_url")
    store = MemoryStore()
    runtime = Runtime(shop.toolbox, store)
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "assistant", "tool": "agent:assistant", "args": {"request": "hi"}}]})
    with pytest.raises(CredentialInURLError):
        await runtime.start(chain, meta=meta)
    with pytest.raises(CredentialInURLError):
        await runtime.enqueue(chain, meta=meta)
    assert store.list_runs() == []
    await runtime.aclose()
