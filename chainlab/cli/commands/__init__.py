"""The subcommands of ``chainlab`` that are more than a few lines, one module per group."""
