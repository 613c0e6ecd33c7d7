"""``python -m chainlab`` and the ``chainlab`` console script.

A small launcher in front of :mod:`chainlab.cli`: ``--version`` needs nothing beyond the
base install, and without the ``cli`` extra (typer, rich) the command prints one line naming
the extra to install instead of a traceback.

Why an extra and not the base install: the base install (pydantic, anyio, PyYAML) is what a
service embedding the runtime needs; the command line's stack (typer, click, rich, pygments,
markdown-it) is several times that, and most users meet it through ``chainlab[jupyter]`` or
``chainlab[cli]`` anyway.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

CLI_EXTRA = 'pip install "chainlab[cli]"'


def main(argv: list[str] | None = None) -> None:
    """Run the command line (``argv`` defaults to ``sys.argv[1:]``). Exits 1 with one line
    on stderr when the ``cli`` extra is missing."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in ("--version", "-V"):
        from chainlab import __version__

        print(f"chainlab {__version__}")
        return
    try:
        import rich  # noqa: F401
        import typer  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "typer"
        print(f"chainlab: the command line needs the cli extra ({missing} is not installed): "
              f"{CLI_EXTRA}", file=sys.stderr)
        raise SystemExit(1) from None
    from chainlab.cli import app

    app(args=args, prog_name="chainlab")


if __name__ == "__main__":
    main()
