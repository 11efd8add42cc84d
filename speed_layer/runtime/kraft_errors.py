"""The errors of the embedded Kafka broker and cluster.

Raised by :mod:`speed_layer.runtime.kraft_jvm`, :mod:`~speed_layer.runtime.kraft_node`,
:mod:`~speed_layer.runtime.broker` and :mod:`~speed_layer.runtime.cluster`; the public face
is :mod:`speed_layer.admin`, which re-exports both.
"""

from __future__ import annotations

__all__ = ["BrokerStartError", "KafkaJarsMissingError"]


class BrokerStartError(RuntimeError):
    """The embedded broker did not start (the message holds the tail of its log)."""


class KafkaJarsMissingError(BrokerStartError):
    """The Kafka jars are not in ``<duet_home>/jars/kafka``: run ``make setup``."""
