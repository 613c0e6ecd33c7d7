"""``python -m chainlab.cli``: the command line, as the console script runs it."""

from chainlab.cli import main

main()
