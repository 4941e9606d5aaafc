"""The capture pipeline: from a request's spans and exchanges to a batch at the ingest.

``inbound`` hands the request from the WSGI/ASGI middleware to the span processor;
``processor`` turns OpenTelemetry spans into operations and decides whether each one's capture
is complete; ``operation`` holds one operation's recording; ``recording`` is the seam the
recorders write exchanges through; ``uploader`` (with ``upload_sending``) posts each eligible
operation as one ``capture-batch-v1`` off the request thread.

Imports run one way inside the package: ``processor`` → ``operation`` and ``inbound``,
``inbound`` → ``operation`` (for a type only), ``operation`` → ``recording``; ``uploader`` →
``upload_sending`` and ``recording``. The public names are re-exported by ``reproit_otel``.
"""
