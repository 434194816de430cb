"""The scheduler runs where torch cannot be imported: the simulator drives it with step times alone.

A child process blocks torch and transformers (an import of either raises), imports the scheduler,
its seam and its page pool, and runs requests to their end through `schedule` and
`update_from_output`, preemption included.
"""

from __future__ import annotations

import json
import subprocess
import sys

from triton_backend.scheduler_interface import SchedulerInterface

CHILD = """
import json, sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
from triton_backend.kv_pages import PagePool
from triton_backend.length_predictor import LengthPredictor, PredictorConfig
from triton_backend.sampling_params import SamplingParams
from triton_backend.scheduler import Scheduler, SchedulerConfig
from triton_backend.scheduler_interface import SampledTokens
from triton_backend.sequence import Request

predictor = LengthPredictor(PredictorConfig(min_history=1))
params = SamplingParams(max_tokens=40, ignore_eos=True, temperature=0.0)
predictor.observe(params, 16, 16, predicted=16)  # predicts 16 of the 40: the pool runs short
scheduler = Scheduler(SchedulerConfig(prefill_chunk_tokens=64, max_num_seqs=4), PagePool(4, 16, 256), predictor)
for name in "ab":
    scheduler.add_request(Request.with_choices(name, [1] * 16, params, arrival=0.0))
finished, steps = {}, 0
while scheduler.has_work:
    schedule = scheduler.schedule()
    seqs = schedule.decode + [seq for chunk in schedule.prefill for seq in chunk.samples]
    tokens = {}
    for seq in seqs:
        tokens.setdefault(seq.request_id, {})[seq.index] = 7
    for update in scheduler.update_from_output(schedule, SampledTokens(tokens)):
        if update.finished:
            finished[update.request_id] = update.total_tokens[0]
    steps += 1
stats = scheduler.make_stats()
blocked = [name for name in ("torch", "transformers") if sys.modules.get(name) is not None]
print(json.dumps({"finished": finished, "preemptions": stats.preemptions, "used": stats.kv_pages_used,
                  "loaded": blocked}))
"""


def test_the_scheduler_imports_and_runs_with_torch_blocked():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    # Both run to max_tokens; b, admitted last, gave its pages to a once both outgrew their prediction.
    assert got == {"finished": {"a": 40, "b": 40}, "preemptions": 1, "used": 0, "loaded": []}


def test_the_scheduler_has_the_seam_the_engine_takes():
    from triton_backend.kv_pages import PagePool
    from triton_backend.length_predictor import LengthPredictor
    from triton_backend.scheduler import Scheduler, SchedulerConfig

    scheduler: SchedulerInterface = Scheduler(SchedulerConfig(), PagePool(4, 16, 64), LengthPredictor())
    assert (scheduler.num_waiting, scheduler.num_running, scheduler.num_prefilling) == (0, 0, 0)
