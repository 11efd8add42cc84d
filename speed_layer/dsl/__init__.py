"""The DSL: StreamsBuilder, KStream, KTable, GlobalKTable and grouped/windowed streams.
Each operation only adds frozen nodes to the builder's Topology and returns a new value."""
from .builder import StreamsBuilder
from .kstream import BranchedKStream, KStream
from .ktable import GlobalKTable, KTable
from .grouped import KGroupedStream, KGroupedTable, SessionWindowedKStream, TimeWindowedKStream
from .cogroup import CogroupedKStream, WindowedCogroupedKStream

__all__ = ["StreamsBuilder", "KStream", "BranchedKStream", "KTable", "GlobalKTable", "KGroupedStream", "KGroupedTable", "TimeWindowedKStream",
           "SessionWindowedKStream", "CogroupedKStream", "WindowedCogroupedKStream"]
