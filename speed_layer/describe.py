"""``Topology.describe()``: the text of Kafka's ``TopologyDescription``, character for
character (ported from ``InternalTopologyBuilder.TopologyDescription#toString``):

* ``"Topologies:\\n "`` then, for each sub-topology and global store by id, ``"  "`` and
  its text; a sub-topology's text ends with an empty line, a global store's does not;
* nodes of a sub-topology are ordered as Kafka's ``NodeComparator``: by the size of the
  sub-tree below them (largest first; a node's size is 1 + the sizes of its successors),
  then by name; successors (``-->``) and predecessors (``<--``) are ordered the same way;
* store and topic sets print in ``java.util.HashSet`` iteration order (emulated here: the
  bucket of Java's ``String#hashCode``, then insertion order), as Kafka prints them;
* a sink with a topic extractor prints ``(extractor class: <str(extractor)>)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from .graph.ops import SinkOp, SourceOp

if TYPE_CHECKING:
    from .topology import Topology


def java_string_hash(s: str) -> int:
    """Java's ``String#hashCode`` (over UTF-16 code units, 32-bit overflow)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _table_size_for(c: int) -> int:
    n = 1
    while n < c:
        n <<= 1
    return n


def java_hash_set_order(items: Iterable[str], *, copy: bool = True) -> list[str]:
    """The iteration order of a ``java.util.HashSet`` of ``items`` (added in the given
    order): by bucket ``(h ^ (h >>> 16)) & (capacity - 1)``, then insertion order. ``copy``
    sizes the table as ``new HashSet<>(collection)`` does, else as repeated ``add`` does."""
    xs = list(dict.fromkeys(items))
    n = len(xs)
    if copy:
        cap = _table_size_for(max(int(n / 0.75) + 1, 16))
    else:
        cap = 16
        while n > cap * 0.75:
            cap *= 2

    def bucket(s: str) -> int:
        h = java_string_hash(s)
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(xs, key=lambda s: bucket(s))  # sorted() is stable: insertion order within a bucket


def _java_set(items: Iterable[str]) -> str:
    return "[" + ", ".join(java_hash_set_order(java_hash_set_order(items, copy=False))) + "]"


@dataclass(frozen=True)
class TopologyDescription:
    """Sub-topologies and global stores with their nodes; ``str()`` prints them as Kafka.
    ``subtopology_count`` counts the sub-topologies that generate tasks."""

    text: str
    subtopology_count: int

    @staticmethod
    def of(topology: "Topology") -> "TopologyDescription":
        children = topology.child_map()
        subs = topology.subtopologies()
        globals_ = topology.global_group_ids()
        parts: list[tuple[int, str]] = []
        for sub in subs:
            parts.append((sub.id, _describe_subtopology(topology, sub.id, sub.nodes, children)))
        for proc, gid in globals_.items():
            src = topology.nodes[proc].parents[0]
            text = (f"Sub-topology: {gid} for global store (will not generate tasks)\n"
                    f"    {_node_text(topology, src, [proc], [])}\n"
                    f"    {_node_text(topology, proc, [], [src])}\n")
            parts.append((gid, text))
        text = "Topologies:\n " + "".join("  " + t for _, t in sorted(parts))
        return TopologyDescription(text, len(subs))

    def __str__(self) -> str:
        return self.text


def _node_text(topology: "Topology", name: str, successors: list[str], predecessors: list[str]) -> str:
    node = topology.nodes[name]
    op = node.op
    succ = ", ".join(successors) or "none"
    pred = ", ".join(predecessors) or "none"
    if isinstance(op, SourceOp):
        return f"Source: {name} (topics: {_java_set(op.topics)})\n      --> {succ}"
    if isinstance(op, SinkOp):
        target = f"topic: {op.topic}" if op.topic is not None else f"extractor class: {op.topic_extractor}"
        return f"Sink: {name} ({target})\n      <-- {pred}"
    return f"Processor: {name} (stores: {_java_set(node.stores)})\n      --> {succ}\n      <-- {pred}"


def _describe_subtopology(topology: "Topology", sid: int, members: tuple[str, ...], children: dict[str, list[str]]) -> str:
    member_set = set(members)
    succ = {n: [c for c in children.get(n, []) if c in member_set] for n in members}
    pred = {n: [p for p in topology.nodes[n].parents if p in member_set] for n in members}
    size: dict[str, int] = {}

    def size_of(n: str) -> int:
        if n not in size:
            size[n] = 1 + sum(size_of(c) for c in succ[n])
        return size[n]

    def order(names: Iterable[str]) -> list[str]:
        return sorted(set(names), key=lambda n: (-size_of(n), n))

    lines = [f"Sub-topology: {sid}\n"]
    for n in order(members):
        lines.append(f"    {_node_text(topology, n, order(succ[n]), order(pred[n]))}\n")
    return "".join(lines) + "\n"
