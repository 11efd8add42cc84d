"""Where a pipeline's tables live: the lake, on local disk or an object store (``s3://``).

* :mod:`.root`: the lake root of a command (``--lake``, ``$DUET_LAKE``, ``[tool.duet] lake``);
* :mod:`.uri`: ``s3://bucket/prefix`` roots and their start-up check;
* :mod:`.lock`: the lake lock (``<lake>/.duet.lock``, ``flock``), one writer per lake folder;
  :mod:`.lease`: its form on an object store (a lease object); :mod:`.locking` chooses;
* :mod:`.loaded`: the record of the sample copies loaded into the input topics
  (``<lake>/<pipeline>/_loaded.json``);
* :mod:`.objectstore`: a local S3-compatible store (SeaweedFS) for trying and testing.

The tables' layout itself is :class:`batch_layer.delta.layout.LakeLayout`, and the
object-store side of a location :mod:`batch_layer.delta.storage`. Imports the declaration
only.
"""
