"""The ingest that ships with reproit-otel: ``reproit-otel serve``.

It receives what production sends and keeps it where a developer can pull it from:

* :mod:`~reproit_otel.ingest.app`: the HTTP API (capture batches, OTLP traces, occurrences,
  capsules), a Starlette application;
* :mod:`~reproit_otel.ingest.store`: SQLite or PostgreSQL storage and occurrence grouping;
* :mod:`~reproit_otel.ingest.facts`: what an occurrence is grouped and listed by;
* :mod:`~reproit_otel.ingest.otlp`: failing server spans from OTLP/HTTP protobuf;
* :mod:`~reproit_otel.ingest.accesslog`: one JSON access-log line per request;
* :mod:`~reproit_otel.ingest.guard` and :mod:`~reproit_otel.ingest.connections`: what is
  refused before a route runs (hosts, cross-site writes, key guessing, slow and greedy
  clients); :mod:`~reproit_otel.ingest.numbers`: numbers clients send;
* :mod:`~reproit_otel.ingest.retention`: old batch bodies pruned, and the artifacts only they
  named, counts kept;
* :mod:`~reproit_otel.ingest.server`: the uvicorn server ``reproit-otel serve`` runs;
* :mod:`~reproit_otel.ingest.web`: the web page at ``/`` (occurrences, exchanges, the replay
  command), with :mod:`~reproit_otel.ingest.webauth` (read keys, session cookie),
  :mod:`~reproit_otel.ingest.weblist` and :mod:`~reproit_otel.ingest.webview` (the two
  pages), :mod:`~reproit_otel.ingest.webhtml` (escaping, recorded values) and ``static/``.

The server dependencies (Starlette, uvicorn, opentelemetry-proto) come with the ``serve``
extra; nothing here is imported by the SDK at runtime.
"""
