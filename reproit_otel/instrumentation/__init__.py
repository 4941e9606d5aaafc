"""One module per recorded boundary: ``requests``, ``psycopg2``, ``wsgi``, ``asgi``.

Each library module owns the patching, recording and replay of its library and nothing else.
"""
