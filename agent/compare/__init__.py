"""Fleet-wide comparison from InfluxDB (`gpuagent compare`) and the simulated backfill (`gpuagent sim fleet`)."""
