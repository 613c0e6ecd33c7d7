"""The command line's parts (``chainlab.cli`` is the entry point): loading toolboxes and
chains, driving runs with a progress display, and the tables it prints."""
