"""Concrete pipelines: one module per topology, used by every layer."""
