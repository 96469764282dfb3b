"""The public domain: the declared schema, its columns, and exact per-column value sets and boxes."""
