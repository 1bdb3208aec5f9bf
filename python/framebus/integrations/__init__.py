"""Integrations of framebus with the runtimes its users already run (each imports its peer lazily
and translates names and semantics only; the rings are framebus's own).

- :mod:`framebus.integrations.openfilter`: OpenFilter pipelines whose raw images travel through
  framebus streams (extra ``framebus[openfilter]``).
"""
