"""The stream's schema in code: measurement names (measurements), each collector's and sink's
declaration of the fields it writes (fields: name, type, unit, gauge or counter, help; the
agent's own measurement in agent_health, a built-in plugin's in plugins/NAME/schema.py), the
index the Prometheus sink reads them from (catalog) and the README field tables made of them
(readme)."""
