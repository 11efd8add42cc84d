"""``Serdes.JSON()``: orjson where its bytes are provably the standard library's, the standard
library elsewhere (speed_layer/serde.py). Keys are stored and partitioned by these bytes, so
they must stay ``json.dumps(v, separators=(",", ":"), allow_nan=False)`` byte for byte, and
reading must give ``json.loads``' values."""
from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_layer import Serdes, serde
from speed_layer.errors import SerializationException

JSON = Serdes.JSON()


def _stdlib(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text()
            | st.sampled_from(["9E", "1e5", "0.00001", "\x7f", "é", "null", "-1e-7", "MQ", "9E1"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                       max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_values.filter(lambda v: v is not None))  # (None is a tombstone: no bytes)
def test_serialize_is_the_standard_librarys_bytes_and_reads_back(value: Any) -> None:
    data = JSON.serialize(value)
    assert data == _stdlib(value)
    assert JSON.deserialize(data) == json.loads(data)


@pytest.mark.parametrize("value", [1e-5, 1.5e-7, 1e16, -2.5e300, 0.0001, 123456789012345678901234567890, [1e22, "9E"]])
def test_floats_and_ints_where_orjson_differs(value: Any) -> None:
    assert JSON.serialize(value) == _stdlib(value)
    assert JSON.deserialize(_stdlib(value)) == value


@pytest.mark.parametrize("value", [math.nan, math.inf, [1.0, -math.inf]])
def test_nan_and_infinity_are_refused(value: Any) -> None:
    with pytest.raises(SerializationException):
        JSON.serialize(value)


def test_a_digit_before_an_upper_case_e_in_a_string_stays_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A carrier code such as "9E" is no exponent: orjson's bytes are kept (before, any
    digit followed by "e" or "E" sent the whole value to the slower standard library)."""
    calls: list[Any] = []
    fallback = serde._json_encode

    def spy(value: Any) -> str:
        calls.append(value)
        return fallback(value)

    monkeypatch.setattr(serde, "_json_encode", spy)
    record = {"carrier": "9E", "flight": 3393, "dest": "DTW", "distance": 509}
    assert JSON.serialize(record) == _stdlib(record)
    assert calls == []
    assert JSON.serialize({"x": 1e-7}) == _stdlib({"x": 1e-7})  # an exponent still goes to the standard library
    assert calls == [{"x": 1e-7}]


def _floats_by_exponent() -> list[float]:
    """Floats of every decimal exponent a double has, each with short and long mantissas,
    both signs (1,900 values, fixed)."""
    out = []
    for e in range(-323, 308):
        for m in ("1", "4.5", "9.87654321012345"):
            v = float(f"{m}e{e}")
            out += [v, -v]
    return [v for v in out if v not in (0.0, float("inf"), float("-inf"))]


def test_every_float_exponent_is_the_standard_librarys_bytes() -> None:
    """orjson writes floats below 1e-4 otherwise than repr ("0.00001" vs "1e-05", "1e-7"
    vs "1e-07"): the checks send those, and only shapes like them, to the standard library."""
    values = _floats_by_exponent()
    assert [JSON.serialize(v) for v in values] == [_stdlib(v) for v in values]
    assert JSON.serialize(values) == _stdlib(values)


@pytest.mark.parametrize("value", [{"route": "one-way", "note": "re-entry"}, {"code": "9E", "x": 1.5e16}, ["1e-5 as text"]])
def test_text_that_only_looks_like_a_float_keeps_orjsons_bytes(monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    """An "e-" after a letter, or a "1e-5" inside a string whose "e-" follows a digit: the
    first keeps orjson's bytes, the second goes to the standard library; both equal it."""
    calls: list[Any] = []
    fallback = serde._json_encode
    monkeypatch.setattr(serde, "_json_encode", lambda v: calls.append(v) or fallback(v))
    assert JSON.serialize(value) == _stdlib(value)
    assert calls == ([value] if value == ["1e-5 as text"] else [])


@pytest.mark.parametrize("data", [b"12345678901234567890", b'{"id":123456789012345678901234}', b"[1,-9223372036854775809]", b"7"])
def test_long_integers_are_read_exactly(data: bytes) -> None:
    assert JSON.deserialize(data) == json.loads(data)
    assert type(JSON.deserialize(data)) is type(json.loads(data))
