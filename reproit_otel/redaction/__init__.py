"""Redaction: every rule that keeps secrets out of what leaves the process.

* :mod:`reproit_otel.redaction.core`: secret key names, placeholders, structural redaction
  of JSON values, URLs and forms, configured secret values;
* :mod:`reproit_otel.redaction.sql`: SQL parameters bound to secret columns and the
  database error texts that echo them;
* :mod:`reproit_otel.redaction.body`: text bodies by the names inside them;
* :mod:`reproit_otel.redaction.headers`: request header values as text, keeping their syntax
  (cookie names, the ``Authorization`` scheme);
* :mod:`reproit_otel.redaction.multipart`: ``multipart/form-data`` bodies by field name;
* :mod:`reproit_otel.redaction.text`: free text (exception messages).

The package is pure: no OpenTelemetry import and no I/O. It imports only the JavaScript
value helpers and the keyed identities (``wire/standins.py``) of the wire core; the wire
core, the recorders and the tools import it.
"""
