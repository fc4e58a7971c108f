"""The metrics server of one process: ``/metrics``, ``/status.json``, ``/cluster.json``, ``/``.

``MetricsServer(source)`` listens on ``Config.metrics_port + process`` (at the
process's own host from the hostfile, else 127.0.0.1) on a thread of its own:
``/metrics`` is the Prometheus text format (``timely.metrics.prometheus``),
``/status.json`` this process's status and ``/cluster.json`` every process's
(``timely.metrics.status``), and ``/`` the live status page, served from the package's
``static`` folder (plain HTML, CSS and JavaScript: nothing is built or fetched). A port
already in use stops the process at start with an error naming it.

Costs: nothing until asked; a request costs what its answer reads.
"""
from __future__ import annotations

import json
import logging
import mimetypes
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..config import ConfigError
from .prometheus import Collector
from .status import Source, cluster_status, process_status

log = logging.getLogger("timely.metrics")

STATIC = Path(__file__).parent / "static"


class MetricsError(ConfigError):
    """The metrics server cannot start (its port is taken, or not ours to bind)."""


class MetricsServer:
    """See the module docstring."""

    def __init__(self, source: Source) -> None:
        self.source = source
        config = source.config
        host = config.address_of(source.process)[0] if config.cluster else "127.0.0.1"
        port = config.metrics_port + source.process
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Collector(lambda: process_status(source)))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:          # noqa: N802 - http.server's name
                server._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass                        # a scrape a second is not news

        try:
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise MetricsError(f"process {source.process} cannot serve metrics on {host}:{port} "
                               f"(--metrics-port {config.metrics_port} + process {source.process}): "
                               f"{e.strerror or e}") from None
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True,
                                        name=f"timely-metrics-{source.process}")
        self._thread.start()
        log.info("process %d: metrics at %s/metrics, status page at %s/", source.process, self.url, self.url)

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                body, kind = generate_latest(self.registry), CONTENT_TYPE_LATEST
            elif path == "/status.json":
                body, kind = json.dumps(process_status(self.source)).encode(), "application/json"
            elif path == "/cluster.json":
                body, kind = json.dumps(cluster_status(self.source)).encode(), "application/json"
            else:
                name = "index.html" if path in ("/", "") else path.lstrip("/")
                file = (STATIC / name).resolve()
                if file.parent != STATIC.resolve() or not file.is_file():
                    request.send_error(404, f"no such page: {path}")
                    return
                body = file.read_bytes()
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        except Exception as e:      # noqa: BLE001 - the page shows it; the dataflow goes on
            log.exception("metrics: answering %s failed", path)
            request.send_error(500, f"{type(e).__name__}: {e}")
            return
        request.send_response(200)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(body)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def serve(config: Any, process: int, workers: list, hub: Any) -> MetricsServer:
    """Start process ``process``'s metrics server over ``workers`` (``Config.metrics_port``
    must be set)."""
    return MetricsServer(Source(process, workers, hub, config))
