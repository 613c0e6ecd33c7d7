"""What the designer's step form and palette need from the designer they sit in.

:class:`DesignerHost` is the designer's own Python API, the part the form and the palette
call: a person's edits in the widget go through exactly the methods a script calls, and the
panels import nothing of :class:`~chainlab.jupyter.designer.widget.ChainDesigner`. What they
draw they read from the :class:`~chainlab.jupyter.designer.draft.Draft` they are given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["DesignerHost"]


class DesignerHost(Protocol):
    """The form uses ``toolbox``, ``select`` and the step edits; the palette ``toolbox``,
    ``add_step`` and ``select``; the editor's step picker ``selected`` and ``select``. Each
    edit raises DesignerError for an edit that cannot apply (the form shows it beside the
    field)."""

    @property
    def toolbox(self) -> Toolbox:
        """The tools steps can call."""
        ...

    @property
    def selected(self) -> str | None:
        """The step whose form is shown."""
        ...

    def select(self, step_id: str | None) -> None:
        """Show ``step_id``'s form (None: none) and outline it in the DAG."""
        ...

    def add_step(self, tool: str, step_id: str | None = None,
                 args: Mapping[str, Any] | None = None,
                 depends_on: Iterable[str] | None = None, save_as: str | None = None,
                 when: str | None = None) -> str:
        """Append a step calling ``tool``; returns its id."""
        ...

    def update_step(self, step_id: str, **fields: Any) -> None:
        """Set fields of a step (``None`` resets one)."""
        ...

    def set_arg(self, step_id: str, name: str, value: Any) -> None:
        """Set one argument (a literal or a reference)."""
        ...

    def unset_arg(self, step_id: str, name: str) -> None:
        """Leave an argument out."""
        ...

    def rename_step(self, old: str, new: str) -> None:
        """Rename a step (its references follow)."""
        ...

    def remove_step(self, step_id: str) -> None:
        """Remove a step."""
        ...

    def say(self, text: str, *, error: bool = False) -> None:
        """Show a line in the designer's message area."""
        ...
