"""From a collector's reading to a server: the Accumulator and Point, name rules, sink
isolation, and at-least-once delivery (spool, memory buffer, backoff, batches, HTTP)."""
