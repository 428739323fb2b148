"""`python -m perfsuite.cases.tensor_parallel SCENARIO --tp N --out FILE.jsonl`, under torchrun."""

import os
import sys

from perfsuite.cases.tensor_parallel.worker import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
# Skip interpreter teardown: gloo's worker threads can abort the process while it finalises, even after
# destroy_process_group (pytorch/pytorch#179291); every row is already written and flushed.
os._exit(code)
