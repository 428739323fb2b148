"""Measuring: the device and host facts, the execution paths (eager, graph, compile), timing, memory and
the run's environment on every row."""
