"""What the value gate costs, side by side in ONE process (ratios, not claims).

    .venv/bin/python benchmarks/bench_gate.py [--reps 7]

Each row is a value a tool might return; each column a way to handle it:
  json.dumps     the stdlib encoder writing it (what a store pays anyway: the baseline)
  gate           chainlab._json.to_json_value (surrogates, NaN, depth, sizes: the gate)
  -> dict        Tool.check_output of a tool annotated `-> dict`: pydantic's
                 check and JSON dump, the look for NaN in its Python dump (pydantic writes
                 NaN as null), then the gate
  before         the same two as they were before the gate (main at 3ddddfb: the old
                 to_json_value, and `-> dict` as check + JSON dump + that): copied below,
                 measured in this same run
Each cell is the median of --reps timings (each long enough to be measured) after a
warm-up; the ratio columns divide by json.dumps.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from chainlab import Toolbox
from chainlab._json import to_json_value

tools = Toolbox("bench-gate")


@tools.tool
def as_dict(v: Any) -> dict:  # type: ignore[type-arg]
    return {"v": v}


def _before_gate(value: Any, path: str = "") -> Any:
    """to_json_value as it was before the gate (main at 3ddddfb), for the comparison."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(path)
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(path)
            out[k] = _before_gate(v, f"{path}.{k}" if path else k)
        return out
    if isinstance(value, list | tuple):
        return [_before_gate(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise TypeError(path)


def _before_dict(value: Any) -> Any:
    """`-> dict`'s check_output before the gate: pydantic's check, its JSON dump, the gate."""
    checked = as_dict.output_adapter.validate_python(value)  # type: ignore[union-attr]
    return _before_gate(as_dict.output_adapter.dump_python(  # type: ignore[union-attr]
        checked, mode="json"))


def values() -> dict[str, Any]:
    row = {"id": 17, "name": "Ada Lovelace", "price": 12.5, "tags": ["a", "b"], "ok": True}
    return {
        "an int": 42,
        "a short string": "done",
        "one row (5 fields)": row,
        "100 rows": [dict(row, id=i) for i in range(100)],
        "10,000 rows": [dict(row, id=i) for i in range(10_000)],
        "1 MB of text (non-ASCII)": "é" * 1_000_000,
        "nested 50 deep": _nest(50),
    }


def _nest(depth: int) -> Any:
    value: Any = {"leaf": 1}
    for _ in range(depth):
        value = {"k": value}
    return value


def timed(fn: Callable[[], Any], reps: int) -> float:
    """The median seconds of one call (each timing repeats the call until it is >= 20 ms)."""
    fn()
    n, took = 1, 0.0
    while True:
        started = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - started
        if took >= 0.02:
            break
        n *= 4
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - started) / n)
    return statistics.median(samples)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    reps = parser.parse_args().reps
    print(f"{'value':26} {'json.dumps':>11} {'gate':>11} {'before':>11} {'-> dict':>11} "
          f"{'before':>11}  gate/json  gate/before  dict/before")
    print("-" * 123)
    for name, value in values().items():
        base = timed(lambda v=value: json.dumps(v, ensure_ascii=False), reps)
        gate = timed(lambda v=value: to_json_value(v), reps)
        old = timed(lambda v=value: _before_gate(v), reps)
        dict_ = timed(lambda v=value: as_dict.check_output({"v": v}), reps)
        old_dict = timed(lambda v=value: _before_dict({"v": v}), reps)
        print(f"{name:26} {_us(base):>11} {_us(gate):>11} {_us(old):>11} {_us(dict_):>11} "
              f"{_us(old_dict):>11}  {gate / base:8.1f}x {gate / old:11.2f}x "
              f"{dict_ / old_dict:11.2f}x")


if __name__ == "__main__":
    main()
