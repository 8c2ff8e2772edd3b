"""The reference PySpark pipeline on Gregor (docs/spark.md): a generator of JSON events,
a Structured Streaming job that counts them per event-time window with Spark's built-in
Kafka source and writes the results to a topic and to Parquet, and the results' consumer
view. ``./scripts/spark-pipeline`` runs it."""
