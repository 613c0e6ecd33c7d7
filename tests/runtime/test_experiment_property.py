"""The experiment's promise as a property (DESIGN §22): over random chains of effect-free and
side-effecting steps and random changes (context, a step's constant, tools listed live,
approved or not), the recorded ledger never changes, and no side-effecting call is made
unless its tool is listed in ``live`` and a person approved that very call."""

from __future__ import annotations

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainlab import Chain, Toolbox
from chainlab.events import EventKind
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

EFFECTS = ("charge", "notify")


def toolbox(ledger: list[tuple[str, int, int]]) -> Toolbox:
    tb = Toolbox("prop")

    @tb.tool
    def calc(v: int, c: int) -> int:
        return v * 2 + c

    @tb.tool(side_effects=True)
    def charge(v: int, c: int) -> int:
        ledger.append(("charge", v, c))
        return v + c

    @tb.tool(side_effects=True)
    def notify(v: int, c: int) -> int:
        ledger.append(("notify", v, c))
        return v - c

    return tb


step_specs = st.lists(
    st.tuples(st.sampled_from(["calc", "charge", "notify"]), st.integers(0, 5),
              st.integers(0, 3)),
    min_size=1, max_size=6)


def chain_of(specs: list[tuple[str, int, int]], bump: int | None = None) -> Chain:
    steps = []
    for i, (tool, dep, const) in enumerate(specs):
        source = "{{ context.k }}" if i == 0 else f"{{{{ steps.s{dep % i}.output }}}}"
        c = const + (1 if bump == i else 0)
        steps.append({"id": f"s{i}", "tool": tool, "args": {"v": source, "c": c}})
    return Chain.from_dict({"name": "prop", "steps": steps})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=step_specs, k=st.integers(0, 3), dk=st.integers(0, 1),
       bump=st.one_of(st.none(), st.integers(0, 5)),
       live=st.sets(st.sampled_from(EFFECTS)), approve=st.booleans())
def test_no_side_effect_is_made_unless_listed_live_and_approved(
        specs: list[tuple[str, int, int]], k: int, dk: int, bump: int | None,
        live: set[str], approve: bool) -> None:
    anyio.run(_check, specs, k, dk, bump, live, approve)


async def _check(specs: list[tuple[str, int, int]], k: int, dk: int, bump: int | None,
                 live: set[str], approve: bool) -> None:
    ledger: list[tuple[str, int, int]] = []
    store = MemoryStore()
    async with Runtime(toolbox(ledger), store) as runtime:
        run = await runtime.start(chain_of(specs), {"k": k})
        await run.wait()
        recorded_log = store.load_events(run.run_id)
        made_before = list(ledger)
        change = chain_of(specs, bump) if bump is not None and bump < len(specs) else None
        exp = await runtime.experiment([run.run_id], chain=change, context={"k": k + dk},
                                       live=sorted(live))
        replay = runtime.get_run(exp.rows()[0]["new_run"])
        approved = 0
        while approve and replay.state.status == "suspended":
            for step_id, st_ in replay.state.steps.items():
                if st_.status == "waiting_confirmation":
                    await runtime.decide(replay.run_id, step_id, "approve")
                    approved += 1
            await replay.wait()
        made = ledger[len(made_before):]
        assert store.load_events(run.run_id) == recorded_log  # the recording never changes
        assert all(tool in live for tool, _, _ in made), (made, live)
        assert len(made) <= approved  # each one a person approved, for its own args
        events = store.load_events(replay.run_id)
        started = [e for e in events if e.kind == EventKind.STEP_STARTED
                   and e.payload.get("tool") in EFFECTS]
        approvals = {e.step_id for e in events if e.kind == EventKind.STEP_APPROVED}
        assert len(started) == len(made) and {e.step_id for e in started} <= approvals
