"""Fault-injection suite (issue 10): each module runs on its own and prints its figures."""
