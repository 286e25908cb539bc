"""The stream's schema in code: measurement names (measurements) and, per collector, its fields
(name, type, unit, gauge or counter, help), which the READMEs, the Prometheus sink and compare read."""
