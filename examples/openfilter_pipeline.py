"""An OpenFilter pipeline moving its frames through framebus.

A video source made on the fly by FFmpeg, two filters and a sink, each in its own process started
by OpenFilter's runner, at 1080p or 2160p raw RGB. Run it over each transport and compare:

    python examples/openfilter_pipeline.py --transport all --resolution all --json results.json

The only line a pipeline needs to move its frames through framebus is the one in
``framebus_bench.openfilter_pipeline.run_one`` for the framebus transport::

    import framebus.integrations.openfilter as fb_openfilter
    fb_openfilter.enable()          # before Filter.run_multi / Filter.Runner

(or FRAMEBUS_OPENFILTER=1 in the environment). The filters themselves are plain OpenFilter
filters; see benches/framebus_bench/openfilter_pipeline.py for them and docs/openfilter.md for the
figures.
"""

import sys

from framebus_bench.openfilter_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
