"""Processor API types: Record, Processor, ProcessorContext, punctuation."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Generic, NamedTuple, TypeVar

K = TypeVar("K")
V = TypeVar("V")

Headers = list[tuple[str, bytes | None]]


class Record(NamedTuple):
    """A record flowing through processors: key, value, timestamp (ms) and headers.

    As Kafka's ``Record``: immutable; ``with_key``/``with_value``/``with_timestamp`` return
    copies. (A NamedTuple: creating and copying records is the hot path of every task.)
    """

    key: Any
    value: Any
    timestamp: int
    headers: Headers = ()  # type: ignore[assignment]

    # (the copies are built by ``tuple.__new__``: a NamedTuple's own ``__new__`` is a Python
    # function, one more frame per record and processor)
    def with_key(self, key: Any) -> "Record":
        return _new_tuple(Record, (key, self[1], self[2], self[3]))

    def with_value(self, value: Any) -> "Record":
        return _new_tuple(Record, (self[0], value, self[2], self[3]))

    def with_timestamp(self, timestamp: int) -> "Record":
        return _new_tuple(Record, (self[0], self[1], timestamp, self[3]))

    def with_headers(self, headers: Headers) -> "Record":
        return _new_tuple(Record, (self[0], self[1], self[2], list(headers)))


#: ``_new_tuple(Record, (key, value, timestamp, headers))`` builds a :class:`Record` without
#: the Python frame of a NamedTuple's generated ``__new__`` (the per-record hot path of the
#: task and of the built-in processors)
_new_tuple = tuple.__new__


@dataclass(frozen=True)
class Change(Generic[V]):
    """A KTable update: the ``new`` value and the ``old`` one (None when unknown or absent).
    ``is_latest`` is False for an out-of-order update of a versioned table (older than the
    key's latest version; Kafka's ``Change#isLatest``, KIP-914): it is forwarded, and the
    operators with versioned semantics (table-table and foreign-key joins, ``group_by``)
    skip it."""

    new: V | None
    old: V | None = None
    is_latest: bool = True


@dataclass(frozen=True)
class RecordMetadata:
    """Where the record being processed came from: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


class PunctuationType(Enum):
    """When a punctuation fires: on stream time (advanced by records) or on wall-clock time."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


class Cancellable(ABC):
    """Returned by :meth:`ProcessorContext.schedule`; ``cancel()`` stops the punctuation."""

    @abstractmethod
    def cancel(self) -> None: ...


class ProcessorContext(ABC):
    """What a processor may do (Kafka's ``ProcessorContext``)."""

    @abstractmethod
    def forward(self, record: Record[Any, Any], child_name: str | None = None) -> None:
        """Send ``record`` to all children, or only to ``child_name``.

        Raises:
            StreamsException: if ``child_name`` is not a child of this processor.
        """

    @abstractmethod
    def schedule(self, interval_ms: int, type: PunctuationType, punctuator: Callable[[int], None]) -> Cancellable:
        """Call ``punctuator(timestamp_ms)`` every ``interval_ms`` of stream or wall-clock
        time. Stream-time punctuation fires when stream time passes the next due time
        (first due at the first record); wall-clock punctuation on the wall clock."""

    @abstractmethod
    def get_state_store(self, name: str) -> Any:
        """The store ``name`` connected to this processor.

        Raises:
            InvalidStateStoreException: if it is not connected to this processor.
        """

    @abstractmethod
    def commit(self) -> None:
        """Request a commit of the task as soon as possible."""

    @abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic/partition/offset of the input record being processed (None in a punctuation)."""

    @property
    @abstractmethod
    def task_id(self) -> str:
        """``<subtopology>_<partition>``."""

    @property
    @abstractmethod
    def application_id(self) -> str: ...

    @abstractmethod
    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest record timestamp seen (-1 before any)."""

    @abstractmethod
    def current_system_time_ms(self) -> int:
        """The task's wall-clock time (mocked in the test driver)."""


class Processor(ABC, Generic[K, V]):
    """A user processor (Kafka's ``api.Processor``): ``init`` once per task, ``process``
    per record, ``close`` at shutdown."""

    def init(self, context: ProcessorContext) -> None:
        """Keep ``context`` to forward records, schedule punctuations, reach stores."""
        self.context = context

    @abstractmethod
    def process(self, record: Record[K, V]) -> None: ...

    def close(self) -> None:
        """Release resources; stores are closed by the runtime."""
