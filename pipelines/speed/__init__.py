"""The speed service: a pipeline's topology running on the speed layer (``speed_layer.KafkaStreams``).

* :mod:`.service`: the Streams config of a run, waiting until caught up, the counters and late
  records a run reports (:class:`~.service.SpeedStats`);
* :mod:`.instances` / :mod:`.instance`: ``--instances N``, N processes of one application, and
  one of them (``python -m pipelines.speed.instance``);
* :mod:`.placement`: which sub-topologies each instance runs, by cost;
* :mod:`.server`: ``duet speed --server``, the running speed layer's views over HTTP;
* :mod:`.live_groups`: whether an application of the pipeline is running (its consumer groups).

Imports the declaration and :mod:`pipelines.produce`; the main job and the CLI import it.
"""
