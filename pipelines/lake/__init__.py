"""Where a pipeline's tables live: the lake.

* :mod:`.lock`: the lake lock (``<lake>/.duet.lock``), one writer per lake folder;
* :mod:`.loaded`: the record of the sample copies loaded into the input topics
  (``<lake>/<pipeline>/_loaded.json``).

The tables' layout itself is :class:`batch_layer.delta.layout.LakeLayout`. Imports the
declaration only.
"""
