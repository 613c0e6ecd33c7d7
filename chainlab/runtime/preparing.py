"""What a start does before anything runs, cached so that starting the same chain again (a
loop in a script, a benchmark, a notebook re-run) pays for it once: the value gate on the
chain's values, validation and compilation (by content), and the release order (re-ranked as
durations are learned); and what a new run is before it is stored: :class:`Admitted` (its
checked record, graph and options), :func:`request_hash` (what makes a repeat of a keyed
request the same request) and :class:`OpeningLog` (the head of its log, stored with its
record in one transaction).

:func:`toolbox_of` is the one place the runtime finds the toolbox a run is compiled against
(a start, a fork, a resume, a worker's claim, a takeover, a stored run's handle): its own,
or with the run's ad-hoc agent over it; :func:`adhoc_meta` is what a fork keeps of it."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict
from pydantic_core import PydanticSerializationError

from chainlab._json import NotJSONError, to_json_value
from chainlab.errors import PlanError, Problem
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, compile_chain, used_chains
from chainlab.runtime.history.estimates import History, release_order
from chainlab.store.base import ADHOC_META, FROM_META

if TYPE_CHECKING:
    from chainlab.events import Event
    from chainlab.store.base import RunRecord
    from chainlab.tools import Toolbox

__all__ = ["Admitted", "OpeningLog", "Prepared", "adhoc_meta", "request_hash", "toolbox_of",
           "used_chains"]

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


class _ContentKey(Chain):
    """A chain's content as JSON text, NaN and infinities written as such (pydantic's JSON
    writes them as null): serialised straight to text, where dumping the chain to Python
    data first and that to JSON cost a start 1.8 us per step (issue 38)."""

    model_config = ConfigDict(**{**Chain.model_config, "ser_json_inf_nan": "constants"})


_content_json = _ContentKey.__pydantic_serializer__.to_json


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
        used = used_chains(chain, chains)
        # by a digest of the content (the text itself is as long as the chain, kept per
        # entry); NaN and infinities written as such, so that no chain holding one is taken
        # for the same chain with null there, which passed the gate
        try:
            text = _content_json(chain, exclude_defaults=True).decode()
        except PydanticSerializationError:  # a value JSON cannot hold: the gate names it
            _gate(chain, chain.model_dump(exclude_defaults=True))
            raise
        key = hashlib.sha256("\x1f".join(
            [
                text,
                opts.model_dump_json(),
                ",".join(sorted(context)),
                *(_content_json(c).decode() for c in used.values()),
            ]
        ).encode("utf-8", "surrogatepass")).digest()
        cached = self._compiled.get(key)
        # (the runtime's toolbox, or its overlay with a run's ad-hoc agent: the same chain
        # text may name another agent there)
        if cached is None or cached[0].toolbox is not toolbox:
            # (as data that shares its strings with the chain: a parse of the text would
            # copy every one of them); the gate walks it too: pydantic's JSON form differs
            # from its Python form only where a NaN or an infinity became null, and the text
            # says where there is one (then the Python form, which names its path)
            data = chain.to_dict()
            _gate(chain, data if "NaN" not in text and "Infinity" not in text
                  else chain.model_dump(exclude_defaults=True))
            checked = chain if opts == chain.options else chain.model_copy(update={"options": opts})
            with _building():
                raise_for_problems(checked, toolbox, context=context, chains=chains)
                cached = compile_chain(chain, toolbox, chains, opts), data
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


@dataclass(frozen=True, slots=True)
class Admitted:
    """A new run, checked and compiled, not stored yet: its record, graph and options."""

    record: RunRecord
    graph: Graph
    options: RunOptions


@dataclass(slots=True)
class OpeningLog:
    """Stands in for the store while a new run's first events are emitted (by the kernel,
    as always): it keeps them, and the run status they set, for ``create_run`` to store with
    the run's record in ONE transaction (all or nothing)."""

    events: list[Event] = field(default_factory=list)
    status: str | None = None

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        self.events.extend(events)
        if run_status is not None:
            self.status = run_status


def request_hash(chain_json: str, context: Mapping[str, Any], options: RunOptions | None,
                 run_id: str | None, queue: str | None, paused: bool) -> str:
    """What makes two keyed requests the same request: the chain, the context, the options
    given, the run id asked for, the queue and whether it starts paused."""
    data = {"chain": json.loads(chain_json), "context": context,
            "options": options.model_dump(mode="json", exclude_unset=True) if options else None,
            "run_id": run_id, "queue": queue, "paused": paused}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def toolbox_of(toolbox: Toolbox, meta: Mapping[str, Any], run_id: str | None = None
               ) -> Toolbox:
    """The toolbox a run with ``meta`` is compiled against: ``toolbox`` itself, or, when the
    run keeps an ad-hoc agent (:data:`~chainlab.store.base.ADHOC_META`, which a front end
    made) or the ``MODULE:OBJ`` its agent came from (:data:`~chainlab.store.base.FROM_META`),
    an overlay of it with that agent (:func:`chainlab.agent.adhoc.run_toolbox` restores it).
    Only such a run loads the agent package. Raises UsageError for a definition this
    chainlab cannot read (``run_id`` names the run)."""
    if meta.get(ADHOC_META) is None and meta.get(FROM_META) is None:
        return toolbox
    from chainlab.agent.adhoc import run_toolbox

    return run_toolbox(toolbox, meta, run_id)


def adhoc_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a run's meta that defines its ad-hoc agent or where its agent comes from
    (empty when it has neither): what a fork of the run (or a recording of it) keeps, so that
    the agent is found again."""
    return {key: meta[key] for key in (ADHOC_META, FROM_META) if key in meta}
