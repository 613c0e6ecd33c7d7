"""What a start does before anything runs, cached so that starting the same chain again (a
loop in a script, a benchmark, a notebook re-run) pays for it once: the value gate on the
chain's values, validation and compilation (by content), and the release order (re-ranked as
durations are learned)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError, to_json

from chainlab._json import NotJSONError, to_json_value
from chainlab.errors import PlanError, Problem
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, compile_chain, used_chains
from chainlab.runtime.history.estimates import History, release_order

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["Prepared", "used_chains"]

_KEEP = 64  # entries each cache keeps (oldest dropped first)


@contextlib.contextmanager
def _building() -> Iterator[None]:
    """No cyclic garbage collection while a chain is checked and compiled: that builds a few
    objects per step that all stay (the graph, the record's chain data, the parsed
    templates), and the collector would walk them again and again as they are made (a
    quarter of a 10,000-step start, issue 38). Collection resumes, as it was, at the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _gate(chain: Chain, values: Any) -> None:
    """The chain's values through the value gate (a chain built from Python objects did not
    pass the plan loader's check). Raises PlanError naming the path of the bad value."""
    try:
        to_json_value(values, "chain")
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", str(exc), field=exc.path),
                        chain_name=chain.name) from None


class Prepared:
    """A runtime's caches of compiled chains and release orders."""

    def __init__(self) -> None:
        self._compiled: dict[bytes, tuple[Graph, dict[str, Any]]] = {}
        self._orders: dict[tuple[int, str, str], tuple[Any, ...]] = {}

    def compile(self, chain: Chain, opts: RunOptions, context: dict[str, Any],
                toolbox: Toolbox, chains: Mapping[str, Chain]) -> tuple[Graph, dict[str, Any]]:
        """Gate the chain's values, validate and compile: once per content (a chain equal to
        one done before, its values included, is done). Returns the graph and the chain as
        JSON data (read-only: shared by the records of its runs). Raises PlanError (a bad
        value names its path)."""
        values = chain.model_dump(exclude_defaults=True)
        used = used_chains(chain, chains)
        # by a digest of the content (the text itself is as long as the chain, kept per
        # entry); NaN and infinities written as such, so that no chain holding one is taken
        # for the same chain with null there, which passed the gate
        try:
            text = to_json(values, inf_nan_mode="constants").decode()
        except PydanticSerializationError:  # a value JSON cannot hold: the gate names it
            _gate(chain, values)
            raise
        key = hashlib.sha256("\x1f".join(
            [
                text,
                opts.model_dump_json(),
                ",".join(sorted(context)),
                *(c.model_dump_json() for c in used.values()),
            ]
        ).encode("utf-8", "surrogatepass")).digest()
        cached = self._compiled.get(key)
        if cached is None:
            _gate(chain, values)
            checked = chain if opts == chain.options else chain.model_copy(update={"options": opts})
            with _building():
                raise_for_problems(checked, toolbox, context=context, chains=chains)
                # (as data that shares its strings with the chain: a parse of the text would
                # copy every one of them)
                cached = compile_chain(chain, toolbox, chains, opts), chain.to_dict()
            if len(self._compiled) >= _KEEP:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[key] = cached
        return cached

    def release_order(self, graph: Graph, chain_name: str, policy: str,
                      history: History | None
                      ) -> tuple[Callable[[str], float] | None, dict[str, Any]]:
        """The release order for a start, re-ranked after 1, 2, 4, 8, 16 and then every 32
        learned runs (medians barely move after a few samples; ranking costs O(steps) per
        start, which a tight loop of short runs would pay every time)."""
        if policy == "declaration" or history is None:
            return release_order(graph.nodes, chain_name, policy, history)
        learned = history.runs
        key = (id(graph), chain_name, policy)
        cached = self._orders.get(key)
        if cached is not None and cached[0] is graph and (
            learned == cached[1] or (learned < 16 and learned & (learned - 1))
            or (learned >= 16 and learned - cached[1] < 32)
        ):
            return cached[2], cached[3]
        priority, order = release_order(graph.nodes, chain_name, policy, history)
        if len(self._orders) >= _KEEP:
            self._orders.pop(next(iter(self._orders)))
        self._orders[key] = (graph, learned, priority, order)
        return priority, order
