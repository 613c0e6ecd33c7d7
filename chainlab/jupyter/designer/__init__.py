"""The chain designer: draft and edit a chain in the notebook without typing YAML.

A tool palette, a form per step generated from the tool's input schema (every argument a
literal or a reference picked from what is in scope), live validation, the DAG drawn as
you go (click a node to edit its step), a YAML tab kept in sync both ways, Run and
"Write cell". Opened by ``%chain design [NAME] [--tools VAR]`` or::

    designer = ChainDesigner(toolbox)            # or ChainDesigner(toolbox, chain)
    display(designer)
    a = designer.add_step("fetch", args={"n": 3})
    designer.add_step("summarize", args={"items": f"{{{{ steps.{a}.output }}}}"})
    designer.problems          # exactly what designer.chain.validate(toolbox) reports
    designer.chain             # the Chain, or None while the draft is invalid
    run = designer.run()       # starts it and shows the run widget in place

One pipeline for every change (Python API, form, palette, YAML tab): the draft's data is
written as YAML text (the text is kept verbatim when it was typed), the text is loaded with
``Chain.from_yaml`` and checked with ``Chain.validate(toolbox, context=...)``. So the
problems are exactly the plan layer's (with YAML lines), YAML that does not parse is a
``bad_syntax`` problem with its line (never a traceback), and ``last_valid`` keeps the last
chain that validated. The view (problems, YAML, form) follows at once; the DAG is laid out
again only when its DOT text changes (a literal edit only restyles it), at most every
``DAG_DELAY_S`` while someone types.

The parts: :mod:`.widget` (:class:`ChainDesigner`: the panels and the Python API),
:mod:`.editing` (the step edits of the Python API, a base of :class:`ChainDesigner`),
:mod:`.draft` (the draft, no widgets), :mod:`.edits` (the API's edits as functions of the
draft), :mod:`.head` (name, verdict, context, Run, Write cell), :mod:`.view` (palette and
DAG), :mod:`.editor` with :mod:`.form` and :mod:`.args` (the step form and the YAML tab),
:mod:`.cell` ("Write cell"), and ``widgets/designer.js`` at the repository's top (the
clickable DAG). The panels take the designer as a :class:`~.host.DesignerHost`.
"""

from chainlab.jupyter.designer.draft import DesignerError, Reference
from chainlab.jupyter.designer.editor import YAML_DELAY_S
from chainlab.jupyter.designer.widget import DAG_DELAY_S, ChainDesigner

__all__ = ["DAG_DELAY_S", "YAML_DELAY_S", "ChainDesigner", "DesignerError", "Reference"]
