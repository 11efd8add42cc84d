"""The views page's cache of parsed values holds at most two frames per view (its whole
snapshot, the last key's merged rows), so republished versions do not stay in memory (issue
41's soak: serving's RSS grew with time)."""

from __future__ import annotations

import gc
import json
import weakref

import pandas as pd

from serving.api.pages import _ValuesCache
from serving.views.index import ViewSnapshot
from serving.views.model import ViewSpec

HOUR = 3_600_000


def _snapshot(version: int, keys: int) -> ViewSnapshot:
    frame = pd.DataFrame({
        "key": [f"k{i}" for i in range(keys)], "window_start": [version * HOUR] * keys,
        "window_end": [(version + 1) * HOUR] * keys, "value": [json.dumps({"count": i}) for i in range(keys)],
        "timestamp": [version * HOUR] * keys})
    return ViewSnapshot.from_frame(ViewSpec.tumbling("v", HOUR), version, frame, None)


def test_a_new_version_releases_the_old_frame_and_values_stay_right():
    cache = _ValuesCache()
    old = _snapshot(1, 50)
    assert sorted(cache.get(old, "count")) == list(range(50))
    assert cache.get(old, "count") is cache.get(old, "count")  # a hit
    gone = weakref.ref(old.frame)
    for version in range(2, 30):  # republished many times, whole and key frames charted
        snap = _snapshot(version, 20 + version)
        assert sorted(cache.get(snap, "count")) == list(range(20 + version))
        assert sorted(cache.get(_snapshot(version, 3), "count", key=True)) == [0, 1, 2]
    del old
    gc.collect()
    assert gone() is None
    assert cache.slots() == 2
