"""Vocabulary-parallel (tensor-parallel) cases: one selector call over a torch.distributed process group.

    launch.run_tp_cases(scenario_path, cases, out_dir, env) -> Iterator[row]   one torchrun per tp size
    torchrun --nproc-per-node N -m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl

`launch` starts the workers (`__main__`), which run each case on every rank (`tp_runner`); the selectors,
the process group and the vocabulary slices are in `perfsuite.variants.tensor_parallel`.
Backends: NCCL on CUDA, RCCL on ROCm ("nccl" in torch), gloo on the CPU.
"""
