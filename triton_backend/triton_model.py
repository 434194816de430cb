"""The Triton Python-backend model behind model_repository/gpt2/1/model.py.

initialize() builds the engine for this instance's device (first removing the shared memory a dead
server left, shm_sweep); execute() validates each request, hands it to the engine thread and returns
at once; the response thread sends everything back. A stop (SIGTERM, an unload) lets the streams in
flight finish for up to ``drain_seconds`` (Triton retires an instance when the autoscaler scales in,
and the streams it holds must not be cut), but never past what the server's own exit timeout leaves
(server_stop reads it from the server's arguments, whoever started it), then cancels what is left,
each with a final response that says so, and stops the threads. The drain starts when the server
says it is stopping (server_watch), not at finalize(): Triton calls that only once every stream has
ended. A watchdog ends the stub process if the server dies under it (server_watch).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from typing import Any

import torch
import triton_python_backend_utils as pb_utils

from triton_backend.engine_factory import build_engine
from triton_backend.engine_loop import EngineLoop
from triton_backend.host_memory import keep_freed_memory, release_freed_memory
from triton_backend.outputs import RequestOutput
from triton_backend.sampling_params import InvalidRequest, Limits
from triton_backend.server_stop import StopBudget, read_server_args
from triton_backend.server_watch import watch_parent, watch_stop
from triton_backend.settings import ModelSettings, load_settings
from triton_backend.shm_sweep import sweep
from triton_backend.tokenizer import load_tokenizer
from triton_backend.triton_metrics import TritonMetrics
from triton_backend.triton_requests import parse_request
from triton_backend.triton_responses import Open, Reject, ResponseThread

log = logging.getLogger("nlg.gpt2")


def model_settings(model_config: dict[str, Any]) -> ModelSettings:
    parameters = {k: v.get("string_value", "") for k, v in model_config.get("parameters", {}).items()}
    return load_settings(parameters, os.environ)


class GPT2Model:
    def __init__(self, args: dict[str, str]) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        watch_parent()
        server = read_server_args()
        sweep(prefixes=(server.shm_region_prefix,))
        config = json.loads(args["model_config"])
        settings = model_settings(config)
        kept = keep_freed_memory()
        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            device = torch.device("cuda", int(args.get("model_instance_device_id", "0")))
        else:
            device = torch.device("cpu")
        # Built on the engine's thread, which then steps it (see EngineLoop.built_on_its_thread).
        self._engine, built = EngineLoop.built_on_its_thread(
            lambda: build_engine(settings, device),
            lambda built: built.engine,
            self._respond,
            on_idle=release_freed_memory,
        )
        info, runner, cache = built.info, built.runner, built.engine.cache
        shape = cache.shape
        self._limits = Limits(max_n=built.max_n)
        self._tokenizer = load_tokenizer()
        metrics = TritonMetrics(
            pb_utils, args["model_name"], args["model_version"], args.get("model_instance_name", ""), info
        )
        self._metrics = metrics
        self._responses = ResponseThread(pb_utils, metrics, self._engine_stats, self._abort)
        self._stop = StopBudget(settings.drain_seconds, server.exit_timeout_seconds)
        self._stop_noticed: float | None = None
        self._ids = itertools.count()
        self._responses.start()
        name, version = args["model_name"], args["model_version"]
        watch_stop(server.http_url, name, str(version), busy=self._busy, on_stopping=self._drain)
        log.info(
            "%s instance %s: %s%s%s; KV cache %d pages of %d tokens (%.0f MiB, %d full-context sequences)",
            args["model_name"],
            args.get("model_instance_name", ""),
            info.describe(),
            f"; {runner.packed_linears} projections packed for oneDNN, {torch.get_num_threads()} torch threads"
            if runner.packed_linears
            else "",
            "; freed host memory kept for reuse" if kept else "",
            cache.num_pages,
            shape.page_size,
            cache.num_pages * shape.bytes_per_page / 2**20,
            cache.num_pages // shape.pages_per_sequence,  # whole sequences, as engine_factory's line says
        )
        if info.random_weights:
            log.warning(
                "no weights_path: serving RANDOMLY INITIALISED %s; set weights_path for real text",
                info.preset,
            )

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            arrival = time.monotonic()
            sender = request.get_response_sender()
            try:
                parsed = parse_request(pb_utils, request, self._tokenizer, self._limits)
            except InvalidRequest as err:
                self._responses.put(Reject(sender, str(err)))
                continue
            request_id = f"r{next(self._ids)}"
            self._responses.put(Open(request_id, sender, parsed.options, parsed.params.n))
            self._engine.add(request_id, parsed.prompt_ids, parsed.params, arrival)

    def finalize(self) -> None:
        # Every wait fits the stop's budget: past Triton's exit timeout the server crashes.
        end = self._stop.drain_end(self._notice_stop())
        threads = self._stop.margin_seconds / 3
        self._engine.stop(drain_seconds=max(0.0, end - time.monotonic()), timeout=threads)
        self._responses.stop(timeout=threads)
        self._metrics.keep_past_exit()

    def _notice_stop(self) -> float:
        if self._stop_noticed is None:
            self._stop_noticed = time.monotonic()
        return self._stop_noticed

    def _drain(self) -> None:
        first = self._stop_noticed is None
        seconds = max(0.0, self._stop.drain_end(self._notice_stop()) - time.monotonic())
        self._engine.drain(seconds)
        if first:
            log.info(
                "the server is stopping: streams still open in %.1f s are cut (exit timeout %d s)",
                seconds,
                self._stop.exit_timeout_seconds,
            )

    def _respond(self, output: RequestOutput) -> None:
        # The engine sends its outputs here from its first step on, which comes after initialize().
        self._responses.put(output)

    def _busy(self) -> bool:
        stats = self._engine.stats()
        return stats.running_requests + stats.waiting_requests > 0

    def _engine_stats(self) -> Any:
        return self._engine.stats()

    def _abort(self, request_id: str) -> None:
        self._engine.abort(request_id)
