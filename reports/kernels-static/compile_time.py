"""Compile time of a scenario's Triton specialisations with Triton's compiler (no GPU needed).

    python reports/kernels-static/compile_time.py SCENARIO [--tune] [--jobs N] [--target sm_90]

Takes the distinct launches the scenario's Triton cases make (`perfsuite.tools.warm.warm_units`, on a
GPU with the target's SM count and heuristic plans; `--tune` adds `perfsuite tune`'s candidates) and
compiles them for the target through `perfsuite.kernels.resources` into an empty Triton cache: with
`--jobs 1` one at a time here, timing each (wall and CPU, ptxas included); with `--jobs N` in a pool of N
spawned processes, timing the whole (worker start included). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # ptxas runs as a child process
    return time.process_time() + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--target", default="sm_90")
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")  # nothing compiled yet
    os.environ.pop("TRITON_INTERPRET", None)

    from perfsuite.kernels import resources, warm
    from perfsuite.scenario.inputs import dtype_of
    from perfsuite.scenario.load import expand, load

    target = resources.TARGETS[args.target]
    units, launches = warm.warm_units(expand(load(args.scenario)), target.hardware, args.tune)
    keys = []
    for unit in units:
        _, _, constants, integers, warps = unit.key
        dtype = resources.TRITON_TYPES[dtype_of(unit.dtype)]
        keys.append((args.target, unit.kernel, dtype, integers, constants, warps))
    found = {"scenario": args.scenario, "tune": args.tune, "target": args.target, "jobs": args.jobs}
    found |= {"launches": launches, "kernels": len(keys), "cpus": os.cpu_count(), "load": os.getloadavg()}
    start = time.perf_counter()
    if args.jobs > 1:
        resources.compile_all(keys, args.jobs)
    else:
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for key in keys:
            began, cpu_began = time.perf_counter(), _cpu_seconds()
            resources.compile_all([key], jobs=1)
            wall.setdefault(key[1], []).append(time.perf_counter() - began)
            cpu.setdefault(key[1], []).append(_cpu_seconds() - cpu_began)
        found["mean_wall_s"] = {kernel: round(statistics.mean(v), 2) for kernel, v in wall.items()}
        found["mean_cpu_s"] = {kernel: round(statistics.mean(v), 2) for kernel, v in cpu.items()}
        found["cpu_s"] = round(sum(sum(v) for v in cpu.values()), 1)
        found["count"] = {kernel: len(v) for kernel, v in wall.items()}
    found["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
