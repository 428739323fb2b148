"""perfsuite: timing, traffic and parity of the speculative-decoding draft step's top-k selection."""

__version__ = "0.1.0"
