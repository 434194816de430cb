"""Config reload: notices when the YAML file changes and parses it, keeping the running config on error.

This module owns the file watch and nothing else. It compares the file's content (a SHA-256), not its
modification time, because a Kubernetes ConfigMap volume is updated by swapping a symlink: the
mtime a reader sees may not move, the content does. A file that no longer parses is logged with
every error, once per content, and the running configuration stays in force.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from autoscaler.config import AutoscalerConfig, ConfigError, load_config

log = logging.getLogger(__name__)


class ConfigWatcher:
    """``load()`` once at start (raises :class:`ConfigError`), then ``poll()`` every round."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.current: AutoscalerConfig | None = None
        self.previous: AutoscalerConfig | None = None
        self.last_error: str | None = None
        self._digest: str | None = None

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError as e:
            message = f"cannot read {self.path}: {e.strerror or e}; keeping the running config"
            if message != self.last_error:
                log.error("%s", message)
            self.last_error = message
            return None

    def load(self) -> AutoscalerConfig:
        self._digest = self._read_digest()
        self.current = load_config(self.path)
        return self.current

    def poll(self) -> AutoscalerConfig | None:
        """The new configuration if the file changed and parses; otherwise None."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return None
        self._digest = digest
        try:
            config = load_config(self.path)
        except ConfigError as e:
            self.last_error = str(e)
            log.error("%s changed but was not applied; keeping the running config. %s", self.path, e)
            return None
        self.last_error = None
        if config == self.current:
            return None
        log.warning("%s changed: applying the new configuration", self.path)
        self.previous, self.current = self.current, config
        return config

    def refuse(self, reason: str) -> None:
        """The configuration `poll()` just returned could not be applied: the running one stays."""
        self.current, self.last_error = self.previous, reason
        log.error("%s changed but was not applied; keeping the running config. %s", self.path, reason)
