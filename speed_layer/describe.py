"""``Topology.describe()``: the text format of Kafka's ``TopologyDescription``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .graph.ops import GlobalStoreOp, SinkOp, SourceOp

if TYPE_CHECKING:
    from .topology import Topology


@dataclass(frozen=True)
class TopologyDescription:
    """Sub-topologies and global stores with their nodes; ``str()`` prints them as Kafka."""

    text: str
    subtopology_count: int

    @staticmethod
    def of(topology: "Topology") -> "TopologyDescription":
        children = topology.child_map()
        lines = ["Topologies:"]

        def node_lines(name: str) -> list[str]:
            node = topology.nodes[name]
            op = node.op
            out: list[str] = []
            if isinstance(op, SourceOp):
                topics = ", ".join(op.topics)
                out.append(f"    Source: {name} (topics: [{topics}])")
            elif isinstance(op, SinkOp):
                topic = op.topic if op.topic else "<extracted by a TopicNameExtractor>"
                out.append(f"    Sink: {name} (topic: {topic})")
            else:
                out.append(f"    Processor: {name} (stores: [{', '.join(node.stores)}])")
            if not isinstance(op, SinkOp):
                out.append(f"      --> {', '.join(children.get(name, [])) or 'none'}")
            if node.parents:
                out.append(f"      <-- {', '.join(node.parents)}")
            return out

        subs = topology.subtopologies()
        for sub in subs:
            lines.append(f"   Sub-topology: {sub.id}")
            for n in sub.nodes:
                lines.extend(node_lines(n))
        gid = len(subs)
        for n in topology.nodes.values():
            if isinstance(n.op, GlobalStoreOp):
                lines.append(f"   Sub-topology: {gid} for global store (will not generate tasks)")
                for m in (*n.parents, n.name):
                    lines.extend(node_lines(m))
                gid += 1
        return TopologyDescription("\n".join(lines) + "\n", len(subs))

    def __str__(self) -> str:
        return self.text
