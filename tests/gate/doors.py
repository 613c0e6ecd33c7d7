"""What the door tests share: a tally of the hostile examples each door refused and took
(printed with -s, and checked: a door's test that met no hostile value proves nothing).
Each door's test runs its hypothesis function inside itself and checks the tally at its end
(so the count holds on any xdist worker)."""

from __future__ import annotations


class Tally:
    """Counts one door's examples: refused (a clear error) and taken (kept exactly)."""

    def __init__(self, door: str):
        self.door = door
        self.counts = {"refused": 0, "taken": 0}

    def refused(self) -> None:
        self.counts["refused"] += 1

    def taken(self) -> None:
        self.counts["taken"] += 1

    @property
    def total(self) -> int:
        return self.counts["refused"] + self.counts["taken"]

    def check(self, *, minimum: int) -> None:
        """At least ``minimum`` examples, some of each kind (printed for the record)."""
        print(f"\n[door] {self.door}: {self.total} examples, {self.counts['refused']} refused, "
              f"{self.counts['taken']} taken")
        assert self.total >= minimum, (self.door, self.counts)
        assert self.counts["refused"] > 0 and self.counts["taken"] > 0, (self.door, self.counts)

