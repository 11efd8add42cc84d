"""Delta Lake IO for the batch layer."""

from batch_layer.delta.io import read_arrow, read_table, table_exists, table_version, write_table

__all__ = ["read_arrow", "read_table", "table_exists", "table_version", "write_table"]
