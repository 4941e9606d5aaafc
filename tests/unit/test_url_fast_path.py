"""The plain-URL fast path of ``url_path_and_query`` answers exactly what the full parser does.

``wire/urls.py`` answers plain absolute http(s) URLs without running the WHATWG state machine.
These tests generate URLs around the edges of what the fast path accepts (IPv4-like hosts,
Punycode labels, ports near 65535, every printable ASCII character in paths and queries, dot
segments spelled every way) and check, for each one the fast path accepts, that its answer is
the full parser's; and that the public function always equals the full parser.
"""

from __future__ import annotations

import string

from hypothesis import example, given, settings
from hypothesis import strategies as st

from reproit_otel.wire.urls import (
    _full_path_and_query,
    _plain_path_and_query,
    url_path_and_query,
)

_PRINTABLE = "".join(chr(c) for c in range(0x21, 0x7F))
_TRICKY = ["", ".", "..", "%2e", "%2E", ".%2e", "%2e.", "%2E%2e", "a.", ".a", "%", "%zz", "\\"]

_label = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=6),
    st.sampled_from(["0", "00", "255", "256", "0x", "0x7f", "0XfF", "xn--ls8h", "xn--", "Xn--a"]),
    st.integers(min_value=0, max_value=999).map(str),
)
_host = st.one_of(
    st.lists(_label, min_size=1, max_size=5).map(".".join),
    st.tuples(*[st.integers(0, 300)] * 4).map(lambda parts: ".".join(map(str, parts))),
    st.sampled_from(["", "a..b", "a.", "[::1]", "u@h", "u:p@h", "h%41", "é.fr", "a b"]),
)
_segment = st.one_of(st.text(alphabet=_PRINTABLE, max_size=6), st.sampled_from(_TRICKY))
_path = st.one_of(
    st.just(""),
    st.lists(_segment, max_size=4).map(lambda segments: "/" + "/".join(segments)),
)
_query = st.one_of(
    st.just(""), st.just("?"), st.text(alphabet=_PRINTABLE, max_size=10).map(lambda q: "?" + q)
)
_fragment = st.one_of(st.just(""), st.text(max_size=5).map(lambda f: "#" + f))
_port = st.one_of(
    st.just(""),
    st.sampled_from([":", ":0", ":80", ":65535", ":65536", ":99999", ":000080", ":8x"]),
    st.integers(0, 70000).map(lambda p: f":{p}"),
)
_scheme = st.sampled_from(["http", "https", "HTTP", "hTTpS", "ws", "ftp", "file", "foo", "http:"])
_noise = st.sampled_from(["", " ", "\t", "\n", "\x00", "\u00e9", "\ud800", "\x7f"])


@st.composite
def _urls(draw: st.DrawFn) -> str:
    url = (
        draw(_scheme)
        + "://"
        + draw(_host)
        + draw(_port)
        + draw(_path)
        + draw(_query)
        + draw(_fragment)
    )
    noise = draw(_noise)
    if noise:
        at = draw(st.integers(0, len(url)))
        url = url[:at] + noise + url[at:]
    return url


# Close to plain: mostly accepted by the fast path, with one odd part now and then.
_PATH_SAFE = "".join(c for c in _PRINTABLE if c not in '"#<>?`{}\\')
_QUERY_SAFE = "".join(c for c in _PRINTABLE if c not in "\"#<>'")
_plain_label = st.text(
    alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=5
)
_plain_host = st.one_of(
    st.lists(_plain_label, min_size=1, max_size=3).map(".".join).filter(lambda h: "xn--" not in h),
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda parts: ".".join(map(str, parts))),
)
_plain_segment = st.one_of(
    st.text(alphabet=_PATH_SAFE, max_size=6), st.text(alphabet=_PATH_SAFE, max_size=2)
)


@st.composite
def _plainish_urls(draw: st.DrawFn) -> str:
    segments = draw(st.lists(_plain_segment, max_size=4))
    path = draw(st.sampled_from(["", "/"])) if not segments else "/" + "/".join(segments)
    query = draw(st.one_of(st.just(""), st.text(alphabet=_QUERY_SAFE, max_size=8).map("?".__add__)))
    return (
        draw(st.sampled_from(["http", "https", "HTTPS"]))
        + "://"
        + draw(_plain_host)
        + draw(st.one_of(st.just(""), st.integers(0, 65535).map(lambda p: f":{p}")))
        + path
        + query
        + draw(st.one_of(st.just(""), st.text(alphabet=_PRINTABLE, max_size=4).map("#".__add__)))
    )


@settings(max_examples=3000, deadline=None)
@given(_plainish_urls())
def test_fast_path_agrees_on_nearly_plain_urls(url: str) -> None:
    fast = _plain_path_and_query(url)
    assert fast is None or fast == _full_path_and_query(url)
    assert url_path_and_query(url) == _full_path_and_query(url)


@settings(max_examples=3000, deadline=None)
@given(_urls())
@example("http://127.0.0.1:41041/rate")
@example("https://api.example.com/v1/rates?c=eu&token=$reproit")
@example("http://h/a/%2E%2e/b?x")
@example("http://1.2.3.4.5/")
@example("http://h:65536/")
def test_fast_path_answers_what_the_full_parser_answers(url: str) -> None:
    fast = _plain_path_and_query(url)
    full = _full_path_and_query(url)
    if fast is not None:
        assert fast == full
    assert url_path_and_query(url) == full


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=_PRINTABLE + " \t\\", max_size=40))
def test_any_text_after_a_plain_prefix_agrees(tail: str) -> None:
    url = "http://svc:8080/" + tail
    fast = _plain_path_and_query(url)
    if fast is not None:
        assert fast == _full_path_and_query(url)
    assert url_path_and_query(url) == _full_path_and_query(url)


def test_the_fast_path_takes_the_common_shapes() -> None:
    """The fast path is not vacuous: ordinary service URLs take it."""
    assert [
        _plain_path_and_query(url)
        for url in [
            "http://127.0.0.1:41041/rate",
            "https://api.example.com/v1/rates?c=eu&token=$reproit",
            "http://svc",
            "http://svc?",
            "HTTP://Svc-1.internal:8080/a//b;c=d?x=%20&y#frag",
        ]
    ] == ["/rate", "/v1/rates?c=eu&token=$reproit", "/", "/", "/a//b;c=d?x=%20&y"]


def test_the_fast_path_declines_what_needs_the_parser() -> None:
    declined = [
        "http://1.2.3/x",  # IPv4 shorthand
        "http://010.0.0.1/x",  # octal part
        "http://a.0x1/x",  # ends in a hex number
        "http://xn--ls8h/p",  # Punycode
        "http://h:65536/",  # port out of range (the parser rejects it)
        "http://u@h/",  # user info
        "http://h/a/../b",  # dot segments
        "http://h/a/%2e/b",
        "http://h/a b",  # encoded by the parser
        "http://h/a\\b",
        "http://h/?a'b",
        "http://h/é",
        "ftp://h/x",
        " http://h/x",
    ]
    assert [url for url in declined if _plain_path_and_query(url) is not None] == []
