"""Test helpers that run a Topology without a broker (Kafka's ``kafka-streams-test-utils``)."""
from .driver import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"]
