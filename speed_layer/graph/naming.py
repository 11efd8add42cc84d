"""Generated names, as Kafka's InternalStreamsBuilder: ``<PREFIX>-<10-digit index>``."""
from __future__ import annotations


class NameGenerator:
    """One counter per topology shared by processors and stores (as Kafka's ``index``)."""

    def __init__(self) -> None:
        self._index = 0

    def new(self, prefix: str) -> str:
        """``KSTREAM-FILTER-0000000001``-style name; every call takes the next index."""
        name = f"{prefix}-{self._index:010d}"
        self._index += 1
        return name

    def store_name(self, prefix: str) -> str:
        """``KSTREAM-AGGREGATE-STATE-STORE-0000000003``-style store name."""
        return self.new(f"{prefix}-STATE-STORE")
