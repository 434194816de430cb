"""A client process for the lifecycle tests: opens one long stream, prints `streaming` at its first
response and reads on until it is killed. Usage: stream_client.py grpc|http URL."""

from __future__ import annotations

import json
import sys
import urllib.request

from serving_testkit import grpc_generate

SAMPLING = {"max_tokens": 1000, "ignore_eos": True}


def announce() -> None:
    if not announce.done:  # type: ignore[attr-defined]
        announce.done = True  # type: ignore[attr-defined]
        print("streaming", flush=True)


announce.done = False  # type: ignore[attr-defined]


def main(protocol: str, url: str) -> None:
    if protocol == "grpc":
        grpc_generate(url, "Once upon a time", SAMPLING, on_response=announce)
        return
    body = {"text_input": "Once upon a time", "stream": True, "sampling_parameters": json.dumps(SAMPLING)}
    request = urllib.request.Request(
        f"http://{url}/v2/models/gpt2/generate_stream",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        while response.readline():
            announce()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
