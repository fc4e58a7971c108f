"""The ``timely-kafka`` data source: what Spark calls to build a reader or a writer.

Costs: building a reader or a writer parses its options and asks the broker for the
topics' partitions (one metadata request).
"""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from .options import NAME, _options, _ReadConf, _write_conf
from .reader import READ_SCHEMA, _BatchReader, _StreamReader
from .writer import _BatchWriter, _StreamWriter


class TimelyKafkaDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("timely-kafka")``: Kafka under the
    epoch contract, with Spark's Kafka option names (see ``timely.connectors.spark.options``)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _options(self.options)
        return _BatchReader(_ReadConf.parse(opts), opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = _options(self.options)
        return _StreamReader(_ReadConf.parse(opts), opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ValueError(f"{NAME}: a Kafka topic can only be appended to: use mode('append')")
        return _BatchWriter(_write_conf(_options(self.options), schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(_write_conf(_options(self.options), schema, streaming=True))
