"""``Chain.step(step_id)``: the step, or an UnknownChainStepError that suggests the id meant."""

from __future__ import annotations

import pytest

from chainlab import Chain, ChainlabError
from chainlab.errors import UnknownChainStepError, UnknownStepError


def chain_of(*ids: str) -> Chain:
    return Chain.from_dict({"name": "c", "steps": [{"id": i, "tool": "t"} for i in ids]})


def test_a_known_step() -> None:
    chain = chain_of("fetch", "parse")
    assert chain.step("parse") is chain.steps[1]


@pytest.mark.parametrize(
    ("ids", "asked", "message"),
    [
        (("fetch", "parse"), "pars",
         "chain 'c' has no step 'pars'; did you mean 'parse'? (known: fetch, parse)"),
        (("fetch", "parse"), "zzz", "chain 'c' has no step 'zzz' (known: fetch, parse)"),
        (tuple(f"s{i}" for i in range(20)), "s1x",
         "chain 'c' has no step 's1x'; did you mean 's1'?"),
        (tuple(f"s{i}" for i in range(20)), "zzz", "chain 'c' has no step 'zzz'"),
        ((), "a", "chain 'c' has no step 'a'"),
    ],
    ids=["close", "short-list", "many-close", "many-far", "empty"],
)
def test_an_unknown_step(ids: tuple[str, ...], asked: str, message: str) -> None:
    chain = chain_of(*ids)
    with pytest.raises(UnknownChainStepError) as info:
        chain.step(asked)
    err = info.value
    assert str(err) == message  # not repr-quoted like a bare KeyError
    assert (err.step_id, err.chain_name, err.known) == (asked, "c", list(ids))
    # callers that catch KeyError (chainlab.cli.commands.runs.check_args) still do
    assert isinstance(err, KeyError) and isinstance(err, ChainlabError)
    # a chain is not a run: this is not the run-state error of the same name
    assert not isinstance(err, UnknownStepError)


def test_a_huge_int_as_step_id_is_shown_safely() -> None:
    with pytest.raises(UnknownChainStepError, match="has no step <int with more than 4300"):
        chain_of("a").step(10**5000)  # type: ignore[arg-type]
