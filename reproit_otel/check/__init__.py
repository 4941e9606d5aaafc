"""``reproit-otel check``: replay a capsule against the application and give the verdict.

One module per step of a check:

* :mod:`~reproit_otel.check.request`: the recorded request rebuilt from the capsule, and the
  ``--header``/``--cookie`` overrides;
* :mod:`~reproit_otel.check.boot`: why a booted application does not answer on ``$PORT``;
* :mod:`~reproit_otel.check.output`: the application's output, read as it runs and kept bounded;
* :mod:`~reproit_otel.check.exceptions`: the recorded and the replayed exception compared;
* :mod:`~reproit_otel.check.judgement`: the verdict (:class:`Verdict`, :class:`CheckResult`,
  the ``REPROIT:`` markers, the evidence a *fixed* needs);
* :mod:`~reproit_otel.check.run`: spawn or boot the application, fire, collect, and judge
  (:func:`check_capsule`);
* :mod:`~reproit_otel.check.report`: the result printed for people.

Imports run one way, from the first line to the last: ``request``, ``boot``, ``output`` and
``exceptions`` import none of the others; ``judgement`` imports none of them either;
``run`` imports all of those; ``report`` imports ``judgement`` (and, for escaping captured
text, ``reproit_otel.cli.terminal``), never ``run``.
The command line (``reproit_otel.cli.check``) parses arguments and calls ``run`` and
``report``. This package re-exports nothing: import each name from its module.
"""
