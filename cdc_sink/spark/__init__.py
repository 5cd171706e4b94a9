"""Spark: local SparkSession construction for cdc_sink."""
