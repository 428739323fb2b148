"""Measuring: the device and host facts, the execution paths (eager, graph, compile), timing, memory,
threads, interrupts and progress."""
