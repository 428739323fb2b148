"""The scenario: its file loaded and expanded into cases, its tables validated, the settings it gives
every case, and the logits (generated, or read from files)."""
