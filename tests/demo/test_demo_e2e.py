"""``nlg-demo`` as a user runs it, shortened: tritonserver on the tiny model, the capacity measured,
the load sized from it, the autoscaler scaling the instances in place, the summary and the PNG."""

from __future__ import annotations

import re

import pytest

from nlg_demo.run import main


@pytest.mark.e2e
def test_the_demo_sizes_its_load_from_its_capacity_scales_out_in_the_peak_and_back_to_one(tmp_path, capsys):
    # Shorter than the default run (10 s sweep steps, 90 s of load, 90 s to scale in from up to three
    # instances): 5 s steps, 32 s of load, and up to two instances, which a 6 s window and an 8 s
    # stabilization bring back to one within the 48 s after the load stops, its backlog included (a
    # run on a loaded 2-core machine took 23 s to finish the requests in flight when the load stopped).
    out = tmp_path / "demo.png"
    argv = ["--duration", "80", "--load-share", "0.4", "--max-instances", "2", "--sweep-step", "5",
            "--window", "6", "--stabilization", "8", "--interval", "1", "--out", str(out)]  # fmt: skip
    status = main(argv)
    printed = capsys.readouterr().out
    summary = printed.strip().splitlines()[-1]
    assert "one instance carries" in printed  # the load was sized from the measured capacity
    served = re.search(r"requests served (\d+)/(\d+)", summary)
    assert served and served[1] == served[2] and status == 0, summary  # every request served whole
    instances = re.search(r"instances reached (\d+) under load, (\d+) at the end", summary)
    assert instances and int(instances[1]) >= 2 and instances[2] == "1", printed
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
