"""Fused chains of built-in stateless processors: one generated Python function per chain
instead of one frame per processor node (issue 45). Internal: the task calls
:func:`fuse_chains` once its processors are initialized, when the config key
``fuse.stateless.chains`` is on (the default).

A node is *fusable* when its processor is exactly one of the built-in stateless ones below
(a subclass, a user processor, a branch, a stateful or table processor is not). For each
fusable node, children first, a function is generated that runs the node's operation and,
inline, those of its fusable children that have no other parent in the sub-topology, down
to the nodes that are not fusable (or have several parents), whose ``process`` it calls
with a :class:`~.api.Record`; that function becomes the node's ``process`` (an instance
attribute: the processor objects, their ops and the topology are unchanged), and its
``entry(key, value, timestamp, headers)`` the same chain for the task's deserialized
source record (no :class:`~.api.Record` built for it). What it
preserves, operator by operator, is Kafka Streams' (and the unfused processors') own
behaviour:

* the same user functions called with the same arguments in the same order (the
  children of a node with several children in the order of ``context.forward``: the
  task's child order), each record forwarded to the same downstream nodes; a node with
  several children inlines each of them in turn (fan-out);
* records: the key, value, timestamp (ms) and the *same* headers list as the unfused
  processors forward (a filter or peek forwards the record object it was given; called
  through ``entry``, an equal new one);
* the record context: nothing of the task changes per node (the raw record being
  processed, hence ``record_metadata()``, the stream time and the punctuation queues are
  the task's, read as before);
* errors: an exception of a user function propagates unchanged to the task, which hands
  it to ``processing.exception.handler`` (log_and_continue / dead_letter / log_and_fail,
  dead letter and ``dropped-records`` as before: the processing handler names no node);
  a cache flush's record to ``forward_flushed`` as before. Records already forwarded to
  an earlier child stay forwarded, as in the unfused fan-out;
* metrics: these processors count nothing of their own (no dropped-records for a filter,
  as Kafka's ``KStreamFilter``).

Fusable: source and merge (pass through), ``filter`` / ``filter_not``, ``map`` /
``select_key``, ``map_values`` (with or without key), ``flat_map``, ``flat_map_values``
(with or without key), ``peek`` / ``foreach``, ``to_stream``; and a sink partitioned by
its key bytes (no partitioner, no windowed key serde), whose send is inlined: the same
serializer calls, the same ``collector.send(topic, key bytes, value bytes, timestamp,
headers, None)``, and on a serializer's exception the sink's own sender runs on the record
(serializing again, as it does, and handing the error to ``production.exception.handler``,
the dead letter naming the sink). Other nodes end the chain with a call of their ``process``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from .api import Record, _new_tuple
from .builtin import stateless as s

__all__ = ["FUSABLE", "fuse_chains"]

#: the processor types whose operation is generated inline
FUSABLE: frozenset[type] = frozenset({
    s.SourceProcessor, s.PassThroughProcessor, s.FilterProcessor, s.MapProcessor, s.MapValuesProcessor,
    s.FlatMapProcessor, s.FlatMapValuesProcessor, s.PeekProcessor, s.ToStreamProcessor,
})


@lru_cache(maxsize=256)
def _compiled(source: str) -> Any:
    return compile(source, "<fused stateless chain>", "exec")


class _Generator:
    """The source text of one node's fused function and the objects it names."""

    def __init__(self, processors: dict[str, Any], children: dict[str, list[str]], parents: dict[str, int]) -> None:
        self.processors, self.children, self.parents = processors, children, parents
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"_new": _new_tuple, "Record": Record}
        self.n = 0

    def bind(self, obj: Any) -> str:
        """A name in the function's globals for ``obj``."""
        self.n += 1
        name = f"f{self.n}"
        self.names[name] = obj
        return name

    def var(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def node(self, name: str, depth: int, k: str, v: str, rec: str | None) -> None:
        """The code of node ``name`` on key ``k`` and value ``v`` (variable names); ``rec``
        names the record object when ``k``, ``v`` are still its own (a node forwarding it
        unchanged forwards that object), else None."""
        p = self.processors[name]
        kind, op = type(p), p.op
        if kind in (s.SourceProcessor, s.PassThroughProcessor):
            self.forward(name, depth, k, v, rec)
        elif kind is s.FilterProcessor:
            self.emit(depth, f"if {'not ' if op.negate else ''}{self.bind(op.predicate)}({k}, {v}):")
            self.forward(name, depth + 1, k, v, rec)
        elif kind is s.PeekProcessor:
            self.emit(depth, f"{self.bind(op.action)}({k}, {v})")
            if not op.terminal:
                self.forward(name, depth, k, v, rec)
        elif kind is s.MapValuesProcessor:
            v2 = self.var("v")
            self.emit(depth, f"{v2} = {self.bind(op.mapper)}({k + ', ' if op.with_key else ''}{v})")
            self.forward(name, depth, k, v2, None)
        elif kind is s.MapProcessor:
            k2 = self.var("k")
            if op.key_only:
                self.emit(depth, f"{k2} = {self.bind(op.mapper)}({k}, {v})")
                self.forward(name, depth, k2, v, None)
            else:
                v2 = self.var("v")
                self.emit(depth, f"{k2}, {v2} = {self.bind(op.mapper)}({k}, {v})")
                self.forward(name, depth, k2, v2, None)
        elif kind is s.FlatMapProcessor:
            k2, v2 = self.var("k"), self.var("v")
            self.emit(depth, f"for {k2}, {v2} in {self.bind(op.mapper)}({k}, {v}):")
            self.forward(name, depth + 1, k2, v2, None)
        elif kind is s.FlatMapValuesProcessor:
            v2 = self.var("v")
            self.emit(depth, f"for {v2} in {self.bind(op.mapper)}({k + ', ' if op.with_key else ''}{v}):")
            self.forward(name, depth + 1, k, v2, None)
        elif kind is s.ToStreamProcessor:
            k2, v2 = (self.var("k") if op.mapper else k), self.var("v")
            self.emit(depth, f"{v2} = {v}.new")
            if op.mapper:
                self.emit(depth, f"{k2} = {self.bind(op.mapper)}({k}, {v2})")
            self.forward(name, depth, k2, v2, None)
        else:  # pragma: no cover - guarded by FUSABLE
            raise AssertionError(kind)

    def forward(self, name: str, depth: int, k: str, v: str, rec: str | None) -> None:
        """Forward to every child of ``name``: inline when fusable with one parent, else a
        call of the child's ``process`` with the record."""
        kids = self.children[name]
        if not kids:
            self.emit(depth, "pass")
        for child in kids:
            p = self.processors[child]
            if type(p) in FUSABLE and self.parents[child] == 1:
                self.node(child, depth, k, v, rec)
            elif getattr(p.process, "plain_sink", None) is not None:
                self.sink(p.process, depth, k, v)
            else:
                arg = rec or f"_new(Record, ({k}, {v}, ts, headers))"
                self.emit(depth, f"{self.bind(p.process)}({arg})")

    def sink(self, send: Any, depth: int, k: str, v: str) -> None:
        """The send of a sink partitioned by its key bytes, inline
        (:func:`~speed_layer.runtime.sink_sender.sink_sender`'s ``send``): key and value
        serialized by the serdes' raw functions and handed to the task's collector (read at
        each send, as the sender does); when a serializer raises, the sender itself runs on
        the record (it serializes again and hands the error to the production handler)."""
        task, full, kser, vser = send.plain_sink
        t, f, ks, vs = self.bind(task), self.bind(full), self.bind(kser), self.bind(vser)
        kb, vb = self.var("kb"), self.var("vb")
        for line in ("try:", f"    {kb} = None if {k} is None else {ks}({k})", f"    {vb} = None if {v} is None else {vs}({v})",
                     "except Exception:", f"    {self.bind(send)}(_new(Record, ({k}, {v}, ts, headers)))",
                     "else:", f"    {t}.collector.send({f}, {kb}, {vb}, ts, headers, None)"):
            self.emit(depth, line)


def fuse_chains(processors: dict[str, Any], children: dict[str, list[str]], order: tuple[str, ...]) -> list[str]:
    """Give every fusable node of one task (``processors``: node -> its initialized
    processor; ``children``: node -> its children in the sub-topology, in forward order;
    ``order``: the sub-topology's nodes, parents first) a generated ``process`` running
    its chain (see the module docstring). Returns the nodes fused."""
    parents: dict[str, int] = {n: 0 for n in order}
    for n in order:
        for c in children[n]:
            parents[c] += 1
    fused = []
    for name in reversed(order):  # children first: a call targets a node's final process
        p = processors[name]
        if type(p) not in FUSABLE:
            continue
        label = f"fused_chain_from_{name}"  # in tracebacks and profiles
        fn = _generate(processors, children, parents, name, label, entry=False)
        fn.entry = _generate(processors, children, parents, name, label, entry=True)  # type: ignore[attr-defined]
        p.process = fn
        fused.append(name)
    return fused


def _generate(processors: dict[str, Any], children: dict[str, list[str]], parents: dict[str, int], name: str,
              label: str, *, entry: bool) -> Callable[..., None]:
    """The fused function of node ``name``: ``fused(record)``, or with ``entry``
    ``fused(key, value, timestamp, headers)`` (the task's call for a source's record: no
    :class:`~.api.Record` built for it; a node forwarding it unchanged to a node not fused
    gets a new one, equal)."""
    g = _Generator(processors, children, parents)
    g.node(name, 1, "key", "value", None if entry else "record")
    head = "def fused(key, value, ts, headers):\n" if entry else "def fused(record):\n    key, value, ts, headers = record\n"
    exec(_compiled(head + "\n".join(g.lines) + "\n"), g.names)  # noqa: S102 - our generated code, no user text in it
    fn: Callable[..., None] = g.names["fused"]
    fn.__code__ = fn.__code__.replace(co_name=label, co_qualname=label)
    fn.__qualname__ = fn.__name__ = label
    return fn
