"""Measuring: the device, the execution paths (eager, graph, compile), timing, memory, the environment."""
