"""Tools beside the sweep: profiler traces and hardware counters."""
