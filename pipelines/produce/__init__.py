"""Producing a pipeline's input into Kafka.

* :mod:`.load`: the sample data as a backlog (``duet load``, the load phase of ``duet run``);
* :mod:`.replay`: the sample's events live, at the speed layer's pace (``duet run --replay``),
  and :data:`~.replay.Feed`, the live source a speed layer runs with.

Imports the declaration only.
"""
