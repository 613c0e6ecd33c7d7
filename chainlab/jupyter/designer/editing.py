"""The step edits of the designer's Python API: add, update, rename and remove steps, set
and unset arguments, rename the chain. They are the edits of :class:`~.host.DesignerHost`
(what the step form and the palette call) and what a script calls: each computes the
draft's new data with :mod:`.edits` and writes it through the draft's one pipeline
(:meth:`~.draft.Draft.write`), tagged with where the edit came from (``api``, or the box of
the widget that made it). :class:`~.widget.ChainDesigner` has them as its methods."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import chainlab.jupyter.designer.edits as edits

if TYPE_CHECKING:
    from chainlab.jupyter.designer.draft import Draft

__all__ = ["StepEdits"]


class StepEdits:
    """The edits of :class:`~.widget.ChainDesigner` (a base of it); they use its draft, the
    origin of the edit being made, and its selection."""

    _draft: Draft
    _origin: str  # where the edit being made comes from: "api", "yaml", "name", ...
    selected: str | None

    if TYPE_CHECKING:
        def select(self, step_id: str | None) -> None: ...  # the designer's

    def add_step(self, tool: str, step_id: str | None = None, args: Mapping[str, Any] | None
                 = None, depends_on: Iterable[str] | None = None, save_as: str | None = None,
                 when: str | None = None) -> str:
        """Append a step calling ``tool``; returns its id (default: the tool's name, made
        unique). Raises DesignerError for a taken or malformed id. An unknown tool is not
        an error here: it is an ``unknown_tool`` problem, like everything validation finds."""
        step_id, data = edits.add_step(self._draft, tool, step_id, args, depends_on, save_as,
                                       when)
        self._draft.write(data, self._origin)
        return step_id

    def update_step(self, step_id: str, **fields: Any) -> None:
        """Set fields of a step (``tool``, ``args`` (replaced whole), ``depends_on``,
        ``save_as``, ``when``, ``retry``, ``timeout_s``, ``rollback``, ``confirm``,
        ``description``); ``None`` resets a field to its default; ``id=`` renames (see
        :meth:`rename_step`). Raises DesignerError for an unknown step or field."""
        if "id" in fields:
            new = fields.pop("id")
            if new != step_id:
                self.rename_step(step_id, new)
                step_id = new
        self._draft.write(edits.update_step(self._draft, step_id, fields), self._origin)

    def set_arg(self, step_id: str, name: str, value: Any) -> None:
        """Set one argument (a literal, or a reference such as ``"{{ steps.a.output }}"``).
        Raises DesignerError for an unknown step."""
        self._draft.write(edits.set_arg(self._draft, step_id, name, value), self._origin)

    def unset_arg(self, step_id: str, name: str) -> None:
        """Leave an argument out (a required one becomes an ``invalid_args`` problem)."""
        data = edits.unset_arg(self._draft, step_id, name)
        if data is not None:
            self._draft.write(data, self._origin)

    def remove_step(self, step_id: str) -> None:
        """Remove a step. Other steps' ``depends_on`` entries and breakpoints naming it go
        too; references to its output stay and show as ``unknown_reference`` problems, so
        you see what needs a new source. Raises DesignerError for an unknown step."""
        data = edits.remove_step(self._draft, step_id)
        if self.selected == step_id:
            self.selected = edits.neighbour(self._draft, step_id)
        self._draft.write(data, self._origin)

    def rename_step(self, old: str, new: str) -> None:
        """Rename a step; ``depends_on`` entries, references (``{{ steps.OLD.output }}``
        in args, ``when`` and rollback args) and breakpoints follow. Raises DesignerError
        for an unknown step or a taken or malformed new id."""
        data = edits.rename_step(self._draft, old, new)
        if data is None:
            return
        self._draft.write(data, self._origin)
        if self.selected == old:
            self.select(new)

    def set_name(self, name: str) -> None:
        """Rename the chain (``name`` must match ``[A-Za-z0-9_.-]+``; else a problem)."""
        self._draft.write(edits.set_name(self._draft, name), self._origin)

    def _edit_from(self, origin: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, its edits made as coming from ``origin`` (a box of the widget)."""
        before, self._origin = self._origin, origin
        try:
            return fn()
        finally:
            self._origin = before
