"""The tensor-parallel worker (`tp_runner.worker`), one per rank under torchrun: `torchrun --nproc-per-node N
-m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl`."""

import os
import sys

from perfsuite.cases.tensor_parallel.tp_runner import worker

if __name__ == "__main__":
    code = worker()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: gloo's worker threads can abort the process while it finalises, even after
    # destroy_process_group (pytorch/pytorch#179291); every row is already written and flushed.
    os._exit(code)
