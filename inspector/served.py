"""Whether this app is one browser tab's, run by ``contextlens serve`` (which sets
``SERVED_ENV`` in the environment each tab's app inherits). A served session writes no
files where the page says (``ContextLensApp.open_bundle``): the page may be anyone's the
server admits, and the files land on the serving machine. Its own module: serve names it
without importing the app."""

from __future__ import annotations

import os

SERVED_ENV = "CONTEXTLENS_SERVED"


def is_served() -> bool:
    return os.environ.get(SERVED_ENV) == "1"
