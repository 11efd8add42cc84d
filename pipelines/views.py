"""The flights views as the serving layer sees them: :class:`serving.ViewSpec` and GX suites.

One :class:`~serving.views.model.ViewSpec` per materialized view of
:mod:`pipelines.topologies.flights` (derived from its windows, so the two never drift), and
the Great Expectations suite of each view: the standard suite of the serving layer
(non-null keys, unique ``(key, window_start)``, window bounds aligned to the window size)
plus the physical limits of each view's values (:data:`VALUE_LIMITS`).

Example::

    >>> from pipelines.views import VIEW_SPECS, expectations
    >>> VIEW_SPECS["departures_hourly"].size_ms
    3600000
    >>> any(e.kwargs.get("column") == "value.mean_dep_delay" for e in expectations("departures_hourly"))
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.topologies.flights import VIEWS, ViewDef
from serving.views.model import ViewSpec

if TYPE_CHECKING:
    from serving.quality.suite import ExpectationSpec

__all__ = ["VIEW_NAMES", "VIEW_SPECS", "VALUE_LIMITS", "view_spec", "expectations"]

#: The view (= store = output topic) names of the flagship topology, in declaration order.
VIEW_NAMES: tuple[str, ...] = tuple(VIEWS)

#: Physical limits of each view's value fields: ``field -> (min, max)`` (``None`` = open).
#: ``"$"`` is a scalar value (a plain count or sum). Delays are minutes: the data set's
#: earliest departure is 43 minutes early and its longest delay 1301 minutes, so an hourly
#: mean outside [-120, 1500] is a computation error, not weather.
VALUE_LIMITS: dict[str, dict[str, tuple[float | None, float | None]]] = {
    "departures_hourly": {
        "count": (1, None),
        "cancelled": (0, None),
        "dep_delay_n": (0, None),
        "mean_dep_delay": (-120, 1500),
    },
    # a count of flights to destinations in New York's time zone
    "same_tz_hourly": {"$": (1, None)},
    # sum of seats over 24 h per destination (the largest plane has 450 seats; about
    # 170 departures a day to the busiest destination: far below the upper bound)
    "seats_by_dest_daily": {"$": (0, 1_000_000)},
    # legs of one plane's duty session, total air time in minutes (a day has 1440)
    "plane_duty_sessions": {"legs": (1, None), "air_time": (0, None)},
}


def _spec_of(view: ViewDef) -> ViewSpec:
    w: Any = view.windows
    if view.kind == "session":
        return ViewSpec.session(view.name, gap_ms=w.gap_ms, grace_ms=w.grace_ms)
    if view.kind == "hopping":
        return ViewSpec.hopping(view.name, size_ms=w.size_ms, advance_ms=w.advance_ms, grace_ms=w.grace_ms)
    if view.kind == "tumbling":
        return ViewSpec.tumbling(view.name, size_ms=w.size_ms, grace_ms=w.grace_ms)
    raise ValueError(f"view {view.name!r}: unsupported window kind {view.kind!r}")


def view_spec(name: str) -> ViewSpec:
    """The :class:`serving.ViewSpec` of view ``name``.

    Raises:
        KeyError: if the topology has no such view (the message lists the known ones).
    """
    if name not in VIEWS:
        raise KeyError(f"unknown view {name!r}; views: {list(VIEWS)}")
    return _spec_of(VIEWS[name])


#: ``{view: ViewSpec}`` of every view of the flagship topology.
VIEW_SPECS: dict[str, ViewSpec] = {name: view_spec(name) for name in VIEW_NAMES}


def expectations(name: str) -> list[ExpectationSpec]:
    """The GX suite of view ``name``: the standard suite plus :data:`VALUE_LIMITS`.

    ``departures_hourly`` also expects ``cancelled <= count``.

    Raises:
        KeyError: if the topology has no such view.
    """
    from serving.quality.suite import ExpectationSpec, standard_expectations

    exps = standard_expectations(view_spec(name), VALUE_LIMITS.get(name, {}))
    if name == "departures_hourly":
        exps.append(
            ExpectationSpec(
                type="expect_column_pair_values_a_to_be_greater_than_b",
                kwargs={"column_A": "value.count", "column_B": "value.cancelled", "or_equal": True},
            )
        )
    return exps
