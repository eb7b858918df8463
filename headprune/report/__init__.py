"""Reports of a find run for people: the terminal's verdict line and ``report.md`` (``markdown`` for the improve
objective, ``compress`` for the compress one, the words both share in ``text``, generated examples in ``examples``) and
the figures (``plots``).

Imports nothing: ``report.markdown`` writes the run's output folder.
"""
