"""Metrics and the live status page of a running dataflow.

``--metrics-port P`` (``Config.metrics_port``; 0, the default, is off) makes process p
serve, on port P + p:

- ``/metrics``: Prometheus metrics named ``timely_*`` (``prometheus``: the list, with
  their labels), read from plain counters when scraped;
- ``/status.json``: this process's dataflows (graph, per-operator figures, epochs),
  stateful bins, Kafka lag, checkpoints (``status``);
- ``/cluster.json``: every process's status, gathered by the process asked;
- ``/``: the status page (``static/``), which polls ``cluster.json`` once a second and
  draws the dataflow, the bins per worker, epoch latency and Kafka lag.

Modules: ``epochs`` (when each epoch completes, and its latency), ``instruments``
(what a worker measures, and reading it), ``status`` (a process's and the cluster's
status), ``prometheus`` (the collector), ``server`` (the HTTP server).
"""
