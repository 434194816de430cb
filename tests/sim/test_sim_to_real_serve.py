"""The served half of the sim-to-real check: what it records survives the trip between machines."""

from __future__ import annotations

import json

from benchmarks import sim_to_real_serve as serving
from nlgsim.replay import Measured
from nlgsim.workload import Request


def test_requests_and_their_measurements_come_back_as_they_went():
    reqs = [Request(3, 0.25, 128, (48,)), Request(20_001, 0.0, 129, (48, 7))]
    rows = json.loads(json.dumps([serving.request_to_json(r) for r in reqs]))
    assert [serving.request_from_json(row) for row in rows] == reqs
    m = Measured(reqs[1], sent=10.0, first=10.05, last=10.5, tokens=[48, 7], input_tokens=129)
    back = serving.measured_from_json(json.loads(json.dumps(serving.measured_to_json(m))), {r.id: r for r in reqs})
    assert back == m and back.ttft == m.ttft and back.per_token == m.per_token


def test_cpu_lists_read_as_taskset_writes_them():
    assert serving.cpu_list("0-3,8") == {0, 1, 2, 3, 8}
    assert serving.cpu_list("5") == {5}


def test_it_says_how_to_call_it_when_the_arguments_are_wrong(capsys):
    assert serving.main(["plan.json"]) == 2
    assert "sim_to_real_serve plan.json served.json" in capsys.readouterr().err
