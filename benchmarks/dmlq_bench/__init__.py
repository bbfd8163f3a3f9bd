"""The pieces of dmlq's benchmark: data, contenders per library, timing, memory, report."""
