"""A cursor class that went through the recording layer can still be served in a replay.

The recorder mixes :class:`RecordingCursor` (client-side) or :class:`RecordingNamedCursor`
(named cursors) into the application's cursor class; when such a class reaches the replay side
(a factory kept from a recording connection), both layers stand for the C cursor they wrap and
are replaced by the replay stub, while the application's own class is kept.
"""

from __future__ import annotations

import pytest
from psycopg2.extras import RealDictCursor

from reproit_otel.instrumentation._pg_record import (
    RecordingCursor,
    RecordingNamedCursor,
    recording_cursor_class,
)
from reproit_otel.instrumentation._pg_replay import StubCursor, replay_cursor_class


@pytest.mark.parametrize("named", [False, True], ids=["client-side", "named"])
def test_a_recording_cursor_class_replays_as_the_applications_class(named: bool) -> None:
    recorded = recording_cursor_class(RealDictCursor, named=named)
    assert issubclass(recorded, RecordingNamedCursor if named else RecordingCursor)
    served = replay_cursor_class(recorded)
    assert issubclass(served, StubCursor)
    assert not issubclass(served, RecordingCursor)
    assert served.__name__ == "RealDictCursor"


@pytest.mark.parametrize("layer", [RecordingCursor, RecordingNamedCursor])
def test_a_bare_recording_layer_replays_as_the_plain_stub(layer: type) -> None:
    served = replay_cursor_class(layer)
    assert served is replay_cursor_class(None)
