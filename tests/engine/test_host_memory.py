"""Freed tensors' memory is reused, not faulted in again, once ``keep_freed_memory`` has run."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, resource, sys, threading
import torch
from triton_backend.host_memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
result = {"applied": applied}
def step():
    blocks = [torch.ones(int(sys.argv[3]) << 18) for _ in range(8)]  # a step's temporaries (float32)
    del blocks
def run():
    for _ in range(3):
        step()
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    step()
    result["faults"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
if sys.argv[2] == "thread":  # as the engine runs in the Triton model: on a thread of its own
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
else:
    run()
print(json.dumps(result))
"""


def faults(mode: str, where: str, mib: int) -> dict[str, object]:
    command = [sys.executable, "-c", PROBE, mode, where, str(mib)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_step_on_the_engine_thread_reuses_the_memory_the_last_step_freed():
    # A thread's own arena unmaps its heaps once they are free: by default a step of eight 8 MiB
    # tensors faults 1,024 pages of 4 KiB in again here; kept, the next step finds them in the heap.
    # (The main thread's heap gives memory back too, but at sizes that depend on its layout.)
    default, kept = faults("default", "thread", 8), faults("keep", "thread", 8)
    assert kept["applied"] is True
    assert int(default["faults"]) >= 500
    assert int(kept["faults"]) <= int(default["faults"]) // 10
