#!/usr/bin/env python3
"""Count a reader's walk the way structure-review.md Appendix A does.

Input: lines ``phase<TAB>file<TAB>function`` (blank lines and ``#`` lines ignored).

- stops: one per line;
- file hop: consecutive stops in different files;
- return: a hop that arrives at a file already visited (and so left) earlier in the walk;
- distinct files: per phase, the files that phase's stops open; total over the walk.

A hop (and a return) is attributed to the phase of the stop it arrives at, so the
hop from the last stop of phase A to the first stop of phase B counts in B.
Per-phase sums therefore add up to the totals (except distinct files).

Usage: count.py WALK [WALK ...]    (--returns N: also list the N files with most returns)
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path


def read(path: str) -> list[tuple[str, str, str]]:
    rows = []
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        phase, file, func = line.split("\t", 2)
        rows.append((phase.strip(), file.strip(), func.strip()))
    return rows


def count(rows):
    phases: dict[str, dict] = {}
    seen: set[str] = set()
    returns_by_file: Counter[str] = Counter()
    prev = None
    for phase, file, _ in rows:
        p = phases.setdefault(phase, {"stops": 0, "hops": 0, "files": set(), "returns": 0})
        p["stops"] += 1
        p["files"].add(file)
        if prev is not None and file != prev:
            p["hops"] += 1
            if file in seen:
                p["returns"] += 1
                returns_by_file[file] += 1
        seen.add(file)
        prev = file
    total = {
        "stops": sum(p["stops"] for p in phases.values()),
        "hops": sum(p["hops"] for p in phases.values()),
        "files": seen,
        "returns": sum(p["returns"] for p in phases.values()),
    }
    return phases, total, returns_by_file


def main(argv: list[str]) -> None:
    top = 0
    if "--returns" in argv:
        i = argv.index("--returns")
        top = int(argv[i + 1])
        del argv[i:i + 2]
    for path in argv:
        phases, total, rbf = count(read(path))
        print(f"== {path}")
        print(f"{'phase':<8}{'stops':>7}{'hops':>7}{'files':>7}{'returns':>9}")
        for name, p in phases.items():
            print(f"{name:<8}{p['stops']:>7}{p['hops']:>7}{len(p['files']):>7}{p['returns']:>9}")
        print(f"{'total':<8}{total['stops']:>7}{total['hops']:>7}{len(total['files']):>7}{total['returns']:>9}")
        if top:
            print("-- files with most returns")
            for f, n in rbf.most_common(top):
                print(f"{n:>4}  {f}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
