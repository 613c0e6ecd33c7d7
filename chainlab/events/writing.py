"""What a front end shows of the model turns being written (DESIGN §24): the pieces of a
streamed answer (notifications of kind :data:`~chainlab.events.event.MODEL_DELTA`, never
stored) put together by agent step, until the turn is recorded."""

from __future__ import annotations

from typing import Any

from chainlab.events.event import MODEL_DELTA

__all__ = ["Writing"]


class Writing:
    """By agent step, the turn being written and its text so far, from the pieces of a
    streamed answer (:class:`chainlab.agent.model.ModelDelta`; a tool call's arguments as
    `` function(arguments``). A step's entry ends with any event of the step (its turn is
    then recorded, and shown whole)."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[int, str]] = {}

    @staticmethod
    def said(piece: Any) -> str:
        """The text a piece adds."""
        if piece.call_index is None:
            return str(piece.text)
        return (f" {piece.function}(" if piece.function else "") + piece.arguments

    def add(self, piece: Any) -> bool:
        """Take a piece; True when it opens a turn (its first piece seen here)."""
        turn, text = self.open.get(piece.step_id, (None, ""))
        new = turn != piece.turn
        self.open[piece.step_id] = piece.turn, ("" if new else text) + self.said(piece)
        return new

    def heard(self, item: Any) -> bool:
        """What a ``deltas=True`` subscriber heard: a piece is taken (True); an event ends
        its step's turn (False)."""
        if item.kind == MODEL_DELTA:
            self.add(item)
            return True
        self.end(item.step_id)
        return False

    def of(self, step_id: str) -> tuple[int, str] | None:
        """``(turn, text so far)`` of the turn ``step_id`` is writing, or None."""
        return self.open.get(step_id)

    def end(self, step_id: str | None) -> bool:
        """The step's turn is recorded: forget its text; True if there was one."""
        return self.open.pop(step_id, None) is not None if step_id is not None else False
