"""The speed-vs-batch equivalence tests use the session's one SparkSession (``spark`` in
``tests/conftest.py``)."""
