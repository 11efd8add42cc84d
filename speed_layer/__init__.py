"""duet's speed layer: Kafka Streams' semantics in Python.

Build a :class:`Topology` with the DSL (:class:`StreamsBuilder`) or the Processor API, run it
on Kafka with :class:`KafkaStreams`, or in-process with
:class:`speed_layer.testing.TopologyTestDriver`. Timestamps and durations are ms.
"""
from .config import StreamsConfig
from .dsl import (
    BranchedKStream, CogroupedKStream, GlobalKTable, KGroupedStream, KGroupedTable, KStream, KTable, SessionWindowedKStream,
    StreamsBuilder, TimeWindowedKStream, WindowedCogroupedKStream,
)
from .errors import (
    ConfigException, InvalidStateStoreException, InvalidTimestampException, SerializationException,
    StreamsException, TopologyException,
)
from .options import (
    BufferConfig, Consumed, Grouped, Joined, Materialized, Named, Produced, Repartitioned, StreamJoined, Suppressed,
)
from .processor.api import Cancellable, Change, Processor, ProcessorContext, PunctuationType, Record, RecordMetadata
from .serde import Serde, Serdes
from .state import Stores, ValueAndTimestamp, VersionedRecord
from .topology import Topology
from .windows import EmitStrategy, JoinWindows, SessionWindows, SlidingWindows, TimeWindows, Window, Windowed


def __getattr__(name: str) -> object:
    # KafkaStreams pulls in confluent_kafka: import it lazily.
    if name == "KafkaStreams":
        from .runtime.kafka_streams import KafkaStreams

        return KafkaStreams
    raise AttributeError(name)


__all__ = [
    "StreamsConfig", "StreamsBuilder", "KStream", "BranchedKStream", "KTable", "GlobalKTable", "KGroupedStream",
    "KGroupedTable", "TimeWindowedKStream", "SessionWindowedKStream", "CogroupedKStream", "WindowedCogroupedKStream", "ConfigException", "InvalidStateStoreException",
    "InvalidTimestampException", "SerializationException", "StreamsException", "TopologyException", "BufferConfig",
    "Consumed", "Grouped", "Joined", "Materialized", "Named", "Produced", "Repartitioned", "StreamJoined", "Suppressed",
    "Cancellable", "Change", "Processor", "ProcessorContext", "PunctuationType", "Record", "RecordMetadata", "Serde",
    "Serdes", "Stores", "ValueAndTimestamp", "VersionedRecord", "Topology", "JoinWindows", "SessionWindows",
    "SlidingWindows", "TimeWindows", "Window", "Windowed", "EmitStrategy", "KafkaStreams",
]
