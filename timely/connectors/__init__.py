"""The world outside a dataflow: Kafka source and sink operators, and a Spark data source.

- ``epochs``: the contract (epoch headers, epoch-end markers) and value formats;
- ``client``: the Kafka client configuration and the errors that name a problem;
- ``kafka``: ``scope.kafka_source(...)`` and ``stream.kafka_sink(...)``;
- ``spark``: the Spark 4 Python Data Source ``timely-kafka`` (extra ``[spark]``).
"""
