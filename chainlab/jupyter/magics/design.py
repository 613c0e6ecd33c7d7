"""``%chain design [NAME] [--tools VAR]`` (and ``%chain plan ... --design``): the chain
designer opened on a notebook chain, bound back to its name whenever the draft validates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.jupyter.designer.widget import ChainDesigner
from chainlab.jupyter.session import SessionError

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession
    from chainlab.plan.schema import Chain

__all__ = ["open_designer"]


def open_designer(session: NotebookSession, name: str | None, tools_var: str | None, *,
                  chain: Chain | None = None) -> tuple[ChainDesigner, str | None]:
    """A designer for the chain ``NAME`` (a new draft when there is none), bound to
    ``NAME`` whenever it validates; and the note to print about the toolbox choice. Raises
    SessionError."""
    toolbox, note = session.toolbox(tools_var)
    if chain is None and name is not None:
        try:
            chain = session.chain(name)
        except SessionError:
            if name in session.user_ns:
                raise
    designer = ChainDesigner(toolbox, chain, name=name or "draft", session=session,
                             tools_var=tools_var, bind=name)
    return designer, note
