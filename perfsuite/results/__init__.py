"""Results: the column schema, the row pieces, writing and reading results files, run folders and
sweep shards."""
