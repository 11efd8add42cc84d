"""Delta Lake IO for the batch layer, and the layout of a pipeline's lake folder."""

from batch_layer.delta.io import read_arrow, read_table, table_exists, table_version, write_table
from batch_layer.delta.layout import LakeLayout

__all__ = ["LakeLayout", "read_arrow", "read_table", "table_exists", "table_version", "write_table"]
