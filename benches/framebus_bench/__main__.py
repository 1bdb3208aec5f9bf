"""``python -m framebus_bench``: the ``framebus-bench`` program (see :mod:`framebus_bench.cli`)."""

from framebus_bench.cli import entry

entry()
