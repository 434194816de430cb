"""Freed tensors' memory is reused, not faulted in again, once ``keep_freed_memory`` has run."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, resource, sys
import torch
from triton_backend.host_memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
def step():
    blocks = [torch.ones(2 << 20) for _ in range(8)]  # eight 8 MiB tensors, as a step's temporaries
    del blocks
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def faults(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_step_after_the_first_reuses_the_memory_the_last_one_freed():
    default, kept = faults("default"), faults("keep")
    assert kept["applied"] is True
    # By default part of what a step frees goes back to the kernel and faults in again (2,048 pages
    # of 4 KiB with this machine's glibc); kept, the next step finds it all in the heap.
    assert int(default["faults"]) >= 1000
    assert int(kept["faults"]) <= int(default["faults"]) // 10
