"""Interactive queries: read-only views of a state store over the instances a store
provider returns (Kafka's ``QueryableStoreTypes`` and ``CompositeReadOnly*Store`` over a
``StateStoreProvider``). ``KafkaStreams.store(name)`` returns one over the store's
instances in the client's local tasks, given by its :class:`QueryableStoreProvider`. Times
are ms."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ..errors import InvalidStateStoreException
from ..windows import Window, Windowed
from .stores import MAX_TIMESTAMP

__all__ = ["ReadOnlyStoreView", "ReadOnlyKeyValueView", "ReadOnlyWindowView", "ReadOnlySessionView",
           "ReadOnlyVersionedView", "StoreProvider", "store_view", "QueryableStoreProvider"]

#: ``provider(name)``: the open instances of store ``name`` to read (Kafka's
#: ``StateStoreProvider#stores``); raises InvalidStateStoreException when they cannot be read
StoreProvider = Callable[[str], list[Any]]


class ReadOnlyStoreView:
    """Read-only view of one store over the instances a ``provider`` returns: the stores of
    that name in the client's local tasks (Kafka's ``CompositeReadOnly*Store`` over a
    ``StateStoreProvider``). Reads retry when a concurrent write of the stream thread races
    them; a store closed by a rebalance raises InvalidStateStoreException."""

    def __init__(self, provider: StoreProvider, name: str) -> None:
        self._provider, self.name = provider, name

    def _stores(self) -> list[Any]:
        return self._provider(self.name)

    def _read(self, fn: Callable[[list[Any]], Any]) -> Any:
        for _ in range(20):
            try:
                return fn(self._stores())
            except RuntimeError:  # a dict/cache changed size during iteration: read again
                time.sleep(0.005)
            except InvalidStateStoreException:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. a store closed by a rebalance
                raise InvalidStateStoreException(f"state store {self.name} may have migrated to another instance: {exc!r}") from exc
        raise InvalidStateStoreException(f"state store {self.name} kept changing while being read")

    def approximate_num_entries(self) -> int:
        return int(self._read(lambda ss: sum(s.approximate_num_entries() for s in ss)))


class ReadOnlyKeyValueView(ReadOnlyStoreView):
    """``get``, ``get_with_timestamp``, ``range``, ``all`` over key-value stores."""

    def get(self, key: Any) -> Any:
        """The value of ``key`` (None when absent)."""
        return self._read(lambda ss: next((v for v in (s.get(key) for s in ss) if v is not None), None))

    def get_with_timestamp(self, key: Any) -> Any:
        return self._read(lambda ss: next((v for v in (s.get_with_timestamp(key) for s in ss) if v is not None), None))

    def range(self, from_key: Any = None, to_key: Any = None) -> list[tuple[Any, Any]]:
        """``(key, value)`` with ``from_key <= key <= to_key`` in serialized-key order."""
        def rows(ss: list[Any]) -> list[tuple[Any, Any]]:
            out = []
            for s in ss:
                out.extend(s.range_with_key_bytes(from_key, to_key))
            return [(k, v) for _, k, v in sorted(out, key=lambda r: r[0])]
        return self._read(rows)

    def all(self) -> list[tuple[Any, Any]]:
        return self.range(None, None)


class ReadOnlyWindowView(ReadOnlyStoreView):
    """``fetch``, ``fetch_all``, ``all`` over window stores (times in ms)."""

    def fetch(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> Any:
        """``fetch(key, start)``: the value of that window (or None);
        ``fetch(key, from, to)``: ``[(window_start, value)]`` ascending."""
        if time_to is None:
            return self._read(lambda ss: next((v for v in (s.fetch(key, time_from) for s in ss) if v is not None), None))
        return self._read(lambda ss: sorted((r for s in ss for r in s.fetch(key, time_from, time_to)), key=lambda r: r[0]))

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed[Any], Any]]:
        """``[(Windowed(key, window), value)]`` for windows starting in ``[from, to]``."""
        def rows(ss: list[Any]) -> list[tuple[Windowed[Any], Any]]:
            out = []
            for s in ss:
                for k, start, vt in s.window_rows(time_from, time_to):
                    out.append(((s.key_serde.serialize(k) or b"", start), Windowed(k, Window(start, start + s.window_size_ms)), vt.value))
            return [(w, v) for _, w, v in sorted(out, key=lambda r: r[0])]
        return self._read(rows)

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return self.fetch_all(0, MAX_TIMESTAMP)


class ReadOnlySessionView(ReadOnlyStoreView):
    """``fetch``, ``find_sessions``, ``fetch_session``, ``all`` over session stores."""

    def fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        return self._read(lambda ss: [r for s in ss for r in s.fetch(key)])

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> list[tuple[Windowed[Any], Any]]:
        return self._read(lambda ss: [r for s in ss for r in s.find_sessions(key, earliest_session_end, latest_session_start)])

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        return self._read(lambda ss: next((v for v in (s.fetch_session(key, start, end) for s in ss) if v is not None), None))

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return self._read(lambda ss: [r for s in ss for r in s.all()])


class ReadOnlyVersionedView(ReadOnlyStoreView):
    """``get(key, as_of_timestamp=None)`` and ``all`` over versioned stores."""

    def get(self, key: Any, as_of_timestamp: int | None = None) -> Any:
        return self._read(lambda ss: next((v for v in (s.get(key, as_of_timestamp) for s in ss) if v is not None), None))

    def all(self) -> list[tuple[Any, Any]]:
        return self._read(lambda ss: [r for s in ss for r in s.all()])


def store_view(kind: str, name: str, provider: StoreProvider) -> ReadOnlyStoreView:
    """The read-only view of store ``name`` for its kind (``"window"``, ``"session"``,
    ``"versioned"``, else key-value; Kafka's ``QueryableStoreTypes``)."""
    if kind == "window":
        return ReadOnlyWindowView(provider, name)
    if kind == "session":
        return ReadOnlySessionView(provider, name)
    if kind == "versioned":
        return ReadOnlyVersionedView(provider, name)
    return ReadOnlyKeyValueView(provider, name)


class QueryableStoreProvider:
    """The store provider of a streams client's interactive-query views (Kafka's
    ``QueryableStoreProvider`` over a ``StreamThreadStateStoreProvider`` per stream thread
    and the ``GlobalStateStoreProvider``): called with a store name, the open instances of
    that store in the client's local tasks (a global store: the one instance), while the
    client is RUNNING or REBALANCING.

    Args:
        state: the client's state (``KafkaStreams.state``).
        global_stores: the client's global stores, by name.
        tasks: the client's local active tasks (each with ``stores``: name -> store).
    """

    def __init__(self, state: Callable[[], str], global_stores: Callable[[], Mapping[str, Any]],
                 tasks: Callable[[], Iterable[Any]]) -> None:
        self._state, self._global_stores, self._tasks = state, global_stores, tasks

    def validate_running(self) -> None:
        """Kafka's ``validateIsRunningOrRebalancing`` for stores.

        Raises:
            InvalidStateStoreException: the client is not RUNNING or REBALANCING.
        """
        state = self._state()
        if state not in ("RUNNING", "REBALANCING"):
            raise InvalidStateStoreException(f"KafkaStreams is not running. State is {state}.")

    def local_stores(self, name: str) -> list[Any]:
        """The open instances of store ``name`` in the local tasks (global: the one store),
        whatever the client's state."""
        global_stores = self._global_stores()
        if name in global_stores:
            return [global_stores[name]]
        out = []
        for task in self._tasks():
            st = task.stores.get(name)
            if st is not None and st.open:
                out.append(st)
        return out

    def __call__(self, name: str) -> list[Any]:
        """:meth:`local_stores` of ``name`` (a :data:`StoreProvider`).

        Raises:
            InvalidStateStoreException: the client is not RUNNING or REBALANCING.
        """
        self.validate_running()
        return self.local_stores(name)

    def view(self, kind: str, name: str) -> ReadOnlyStoreView:
        """The read-only view of store ``name`` of ``kind`` over this provider (see :func:`store_view`).

        Raises:
            InvalidStateStoreException: the client is not RUNNING or REBALANCING.
        """
        self.validate_running()
        return store_view(kind, name, self)
