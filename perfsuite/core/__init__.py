"""The bottom layer: what every other layer may read (the console, the host, the settings, the dtype
names, the case-kind registry)."""
