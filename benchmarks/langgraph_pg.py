"""LangGraph with its PostgreSQL checkpointer on W1 (a chain of N no-op nodes), for
bench_postgres.py's side-by-side rows. Runs in a separate virtualenv that has LangGraph
(chainlab does not depend on it), e.g.:

    python3 -m venv /tmp/lgvenv
    /tmp/lgvenv/bin/pip install langgraph langgraph-checkpoint-postgres "psycopg[binary]"
    .venv/bin/python benchmarks/bench_postgres.py --langgraph-python /tmp/lgvenv/bin/python

Alone: ``python langgraph_pg.py --dsn DSN --n 300 --reps 5 --durability sync`` prints one
JSON line: the median seconds per run and the versions used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
import uuid
from importlib.metadata import version
from typing import Any, TypedDict


class ChainState(TypedDict):
    x: int


def build(dsn: str, n: int) -> tuple[Any, Any]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row

    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    graph = StateGraph(ChainState)
    names = [f"n{i}" for i in range(n)]
    for name in names:
        graph.add_node(name, lambda state: {"x": state["x"] + 1})
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph.compile(checkpointer=saver), conn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    args = ap.parse_args()
    app, conn = build(args.dsn, args.n)

    def once() -> float:
        config = {"recursion_limit": args.n + 10,
                  "configurable": {"thread_id": uuid.uuid4().hex}}
        t0 = time.perf_counter()
        out = app.invoke({"x": 0}, config, durability=args.durability)
        elapsed = time.perf_counter() - t0
        assert out["x"] == args.n, out
        return elapsed

    once()  # warm-up
    times = [once() for _ in range(args.reps)]
    conn.close()
    print(json.dumps({"median_s": statistics.median(times), "n": args.n,
                      "langgraph": version("langgraph"),
                      "checkpoint_postgres": version("langgraph-checkpoint-postgres")}))


if __name__ == "__main__":
    main()
