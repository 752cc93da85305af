"""``python -m inspector.cli …``: the command line without the console script (``serve``
starts each browser tab's app this way)."""

from inspector.cli import main

main()
