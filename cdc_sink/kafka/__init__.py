"""Kafka: the Maven-resolved broker and Spark-Kafka jars, and a local KRaft broker."""
