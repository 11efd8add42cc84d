"""Record-at-a-time runtime of the speed layer: the embedded broker, Kafka admin helpers, paths."""
