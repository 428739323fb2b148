"""Vocabulary-parallel (tensor-parallel) cases: `launch` starts a torchrun per tp size, whose workers
(`tp_runner.worker`) run each case on every rank; the selectors: `perfsuite.variants.tensor_parallel`."""
