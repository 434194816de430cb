"""Talking to a real tritonserver the way users do: tritonclient gRPC streaming and HTTP generate."""

from __future__ import annotations

import json
import queue
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from triton_backend.cli.requests import generate_inputs


@dataclass
class Stream:
    texts: list[list[str]] = field(default_factory=list)  # per response, the delta of each choice
    finish_reasons: list[str] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)
    error: str | None = None
    finals: int = 0

    def text(self, choice: int = 0) -> str:
        return "".join(r[choice] for r in self.texts)


def grpc_generate(
    url: str,
    prompt: str | bytes | None,
    sampling: dict[str, Any] | str | None,
    on_response: Callable[[], Any] | None = None,
    **kw: Any,
) -> Stream:
    """One streamed request to the end: every response, and the error if one came."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    out = Stream()
    stream = kw.pop("stream", True)

    def callback(result: Any, error: Any) -> None:
        if on_response is not None:
            on_response()
        results.put((result, error))

    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=callback)
        client.async_stream_infer(
            "gpt2",
            generate_inputs(
                prompt,
                sampling,
                stream=stream,
                return_finish_reason=True,
                return_num_output_tokens=True,
                **kw,
            ),
            request_id=uuid.uuid4().hex,
            enable_empty_final_response=True,
        )
        while True:
            result, error = results.get(timeout=120)
            if error is not None:
                out.error = str(error)
                out.finals += 1
                break
            texts = result.as_numpy("text_output")
            if texts is not None:
                out.texts.append([t.decode() for t in texts.reshape(-1)])
                out.finish_reasons = [r.decode() for r in result.as_numpy("finish_reason").reshape(-1)]
                out.num_output_tokens.append(int(result.as_numpy("num_output_tokens").sum()))
            if result.get_response().parameters["triton_final_response"].bool_param:
                out.finals += 1
                break
        client.stop_stream()
    return out


def http_generate_stream(http_url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST to Triton's generate_stream extension; the server-sent events as JSON objects."""
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/gpt2/generate_stream",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read().decode()
    except urllib.error.HTTPError as err:
        return [json.loads(err.read().decode())]
    return [json.loads(line[len("data: ") :]) for line in raw.splitlines() if line.startswith("data: ")]


def scrape(metrics_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on the metrics endpoint, keyed by name and sorted labels."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(
        value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name and set(labels.items()) <= set(sample_labels)
    )


def settled_scrape(metrics_url: str, timeout: float = 30.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape once the model is idle and its counts have stopped moving: the server is shared by the
    session's tests, and what an earlier test's streams finished goes out with the model's next interval
    (``CANCEL_CHECK_INTERVAL``), so a scrape taken as they end would count them for the next test."""
    from triton_backend.triton_responses import CANCEL_CHECK_INTERVAL

    def counts(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[Any, float]:
        return {k: v for k, v in samples.items() if k[0].startswith("nlg_") and k[0].endswith(("_total", "_count"))}

    deadline = time.monotonic() + timeout
    last = scrape(metrics_url)
    while True:
        time.sleep(3 * CANCEL_CHECK_INTERVAL)
        now = scrape(metrics_url)
        idle = metric(now, "nlg_requests_running") == 0 and metric(now, "nlg_requests_waiting") == 0
        if (idle and counts(now) == counts(last)) or time.monotonic() > deadline:
            return now
        last = now


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def stub_pids(server_pid: int) -> list[int]:
    """The Python-backend stubs that `server_pid` started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"triton_python_backend_stub" in cmdline:
            pids.append(int(entry.name))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
