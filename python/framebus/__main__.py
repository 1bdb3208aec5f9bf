"""``python -m framebus``: the ``framebus`` command line."""

from .cli import entry

entry()
