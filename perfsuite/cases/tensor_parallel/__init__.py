"""Vocabulary-parallel (tensor-parallel) draft selection over torch.distributed.

Each rank holds `ceil(V / tp)` columns of the logits. The usual path all-gathers the full `[B, V]`
logits before softmax and top-k; the exact alternative all-gathers per-rank partials (max, sum-exp,
top-k values and global indices: `B x (2 + 2k)` numbers per rank) and merges them.

    tp_variants.names() / get(name)            the TP selectors (allgather_*, sharded_*), with models
    torchrun --nproc-per-node N -m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl
    launch.run_tp_cases(scenario_path, cases, out_dir, env) -> Iterator[row]

Modules: shard (who holds which columns), group (process group, collectives), partials (wire format
and exact merge), tp_variants (registry), rank_sampler (a sample over ranks), rows (row columns),
runner (a case on every rank), worker (the per-rank sweep under torchrun), cases (scenario loading),
launch (torchrun from the main process).
Backends: NCCL on CUDA, RCCL on ROCm ("nccl" in torch), gloo on the CPU.
"""
