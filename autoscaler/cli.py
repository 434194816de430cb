"""``nlg-autoscaler``: runs the autoscaler from a YAML config until SIGTERM or SIGINT.

This module owns the command line and nothing else::

    nlg-autoscaler --config autoscaler.yaml            # run (reloads the file when it changes)
    nlg-autoscaler --config autoscaler.yaml --check    # validate (api.token_file read too): every error, exit 2
    nlg-autoscaler --config autoscaler.yaml --once     # one round, decisions printed as JSON

Exit status: 0 after a clean stop, 2 for a configuration that does not parse, 1 when the service
cannot start (a port it cannot bind, no Kubernetes credentials) or a ``--once`` round failed; the
reason is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from prometheus_client import REGISTRY, CollectorRegistry

from autoscaler import __version__
from autoscaler.app import App, StartupError
from autoscaler.backend_check import backend_report
from autoscaler.config import AutoscalerConfig, ConfigError, read_api_token
from autoscaler.kube import KubeConfigError
from autoscaler.policy import check_notes
from autoscaler.reload import ConfigWatcher

log = logging.getLogger("autoscaler")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nlg-autoscaler",
        description="Scale Triton NLG serving on per-token latency (see docs/autoscaler.md).",
    )
    parser.add_argument("--config", "-c", required=True, help="YAML file (docs/autoscaler-config.md)")
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    parser.add_argument("--once", action="store_true", help="run one round, print the decisions, exit")
    parser.add_argument("--kubeconfig", help="kubeconfig file when not running in a pod")
    parser.add_argument("--identity", help="leader-election identity (default: $POD_NAME or host-pid)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    watcher = ConfigWatcher(args.config)
    try:
        config = watcher.load()
        read_api_token(config.api)
    except ConfigError as e:
        print(f"{args.config}: {e}", file=sys.stderr)
        return 2
    if args.check:
        report = backend_report(config)
        print("\n".join([*report.lines, *check_notes(config.scaler)]))
        if report.refused:
            print(f"{args.config}: " + "; ".join(report.refused), file=sys.stderr)
            return 2
        print(f"{args.config}: ok")
        return 0
    try:
        return _run(args, config, watcher)
    except (StartupError, KubeConfigError) as e:
        print(f"nlg-autoscaler: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, config: AutoscalerConfig, watcher: ConfigWatcher) -> int:
    # The process-wide registry serves /metrics; a one-shot run registers nothing globally.
    registry = CollectorRegistry() if args.once else REGISTRY
    app = App(config, watcher=watcher, registry=registry, kubeconfig=args.kubeconfig, identity=args.identity)
    if args.once:
        try:
            errors = app.controller.run_once()
            print(json.dumps(app.controller.targets.views(), indent=2))
        finally:
            app.stop()
        if errors:
            print(f"nlg-autoscaler: the round failed: {'; '.join(errors)}", file=sys.stderr)
            return 1
        return 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        app.request_stop()  # the main thread leaves wait() and stops everything in __exit__

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("nlg-autoscaler %s: scaling %s (%s policy), identity %s",
             __version__, config.model_id, config.scaler.type, app.identity)  # fmt: skip
    with app:
        app.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
