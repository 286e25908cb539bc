"""The agent's own measurement, `gpuagent`: per collector, per refused NVML call, per GPU that
cannot be opened, per sink and for the agent process (agent/service/measurement.md is generated from it)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPUAGENT,
        (
            gauge("gather_time_ms", float, unit="ms", help="duration of the collector's last run"),
            counter("runs_total", int, unit="runs", help="counter: runs since the agent started"),
            counter(
                "errors_total",
                int,
                unit="runs",
                help="counter: runs that raised an error (logged with the collector's name)",
            ),
            counter("timeouts_total", int, unit="runs", help="counter: runs that overran the collector's timeout"),
            counter(
                "skipped_total",
                int,
                unit="runs",
                help="counter: runs skipped because the previous one was still running",
            ),
            counter("points_total", int, unit="points", help="counter: points the collector produced"),
            counter(
                "late_points_discarded_total",
                int,
                unit="points",
                help="counter: points produced after a timed-out run gave up, discarded",
            ),
            counter(
                "nonfinite_dropped_total", int, unit="fields", help="counter: NaN or infinite field values dropped"
            ),
            counter(
                "out_of_range_dropped_total",
                int,
                unit="fields",
                help="counter: integer field values outside InfluxDB's int64 range dropped (the server would refuse the whole line)",
            ),
            gauge("last_error", str, help="the collector's last error message (absent when it never failed)"),
            gauge(
                "nvml_calls",
                int,
                unit="calls",
                help="NVML calls of the last run (through `Gpu.query`; a field-values batch counts one)",
            ),
            gauge("cpu_time_ms", float, unit="ms", help="CPU time of the collector's thread in its last run"),
            counter("nvml_calls_total", int, unit="calls", help="counter: NVML calls since the agent started"),
            counter(
                "collector_cpu_seconds_total",
                float,
                unit="s",
                help="counter: CPU time of the collector's runs since the agent started",
            ),
            counter(
                "lines_cut_total",
                int,
                unit="lines",
                help="counter, work collector: lines of a server's /metrics over 16 KiB, left out",
            ),
            counter(
                "workloads_cut_total",
                int,
                unit="workloads",
                help="counter, work collector: workloads (model names) past `workloads_per_server` of one piece of work, or past 4,096 in one answer, left out",
            ),
            counter(
                "answers_cut_total",
                int,
                unit="answers",
                help="counter, work collector: server answers over 16 MiB, not read",
            ),
            counter(
                "servers_cut_total",
                int,
                unit="servers",
                help="counter, work collector: found servers left unread in a cycle past `scrape_budget`",
            ),
            counter(
                "job_files_cut_total",
                int,
                unit="files",
                help="counter, work collector: job files left unread by the per-cycle budget (`job_files`, `job_files_per_user`, `jobs_budget`)",
            ),
            counter(
                "job_files_refused_total",
                int,
                unit="files",
                help="counter, work collector: job files refused (a symlink, FIFO or device, over 4 KiB, unparsable, or naming a process of another user than the file's owner)",
            ),
            gauge(
                "started",
                bool,
                help="false: the collector could not be built (its constructor raised something other than a config rejection), so it never runs; `last_error` says why. Absent for a collector that started",
            ),
        ),
        tags=("collector",),
        part="collector",
        source_column=None,
    ),
    Measurement(
        measurements.GPUAGENT,
        (
            counter(
                "nvml_errors_total",
                int,
                unit="answers",
                help="counter: times the call answered this code since the agent started",
            ),
            gauge("nvml_error_code", int, help="the NVML return code (`nvmlReturn_t`)"),
            gauge("nvml_error_gpus", int, unit="GPUs", help="GPUs that answered the call with this code"),
            gauge(
                "nvml_error_permanent",
                bool,
                help="true for a refusal that is not asked again on that GPU (NOT_SUPPORTED, DEPRECATED, FUNCTION_NOT_FOUND, NO_PERMISSION, ARGUMENT_VERSION_MISMATCH)",
            ),
        ),
        tags=("collector", "nvml_call", "nvml_error"),
        part="nvml_error",
        source_column=None,
    ),
    Measurement(
        measurements.GPUAGENT,
        (
            gauge("gpu_available", bool, help="false: the GPU is reported, never read"),
            gauge("gpu_unavailable_reason", str, help="the NVML error that refused it"),
        ),
        part="unavailable_gpu",
        source_column=None,
    ),
    Measurement(
        measurements.GPUAGENT,
        (
            counter(
                "points_written_total", int, unit="points", help="counter: points the sink wrote or the server accepted"
            ),
            counter("sink_errors_total", int, unit="writes", help="counter: writes to the sink that raised an error"),
            counter(
                "stalled_dropped_total",
                int,
                unit="points",
                help="counter: points dropped because the sink's write did not return while more than 200,000 points waited for it, or at stop (present once it happened; sinks that only buffer are never queued)",
            ),
        ),
        tags=("sink",),
        part="sink",
        source_column=None,
    ),
    Measurement(
        measurements.GPUAGENT,
        (
            gauge("uptime_s", float, unit="s", help="time since the agent started"),
            gauge("gpus", int, unit="GPUs", help="GPUs the agent found"),
            gauge("gpus_lost", int, unit="GPUs", help="of those, fallen off the bus (`GPU_IS_LOST`)"),
            gauge(
                "gpus_unavailable",
                int,
                unit="GPUs",
                help="GPUs NVML lists that could not be opened (handle or identity refused)",
            ),
            gauge("collectors", int, unit="collectors", help="collectors running"),
            counter(
                "cpu_seconds_total", float, unit="s", help="counter: CPU time (user + system) of the agent process"
            ),
            gauge("rss_bytes", int, unit="bytes", help="resident memory of the agent process"),
            counter(
                "names_refused_total",
                int,
                unit="names",
                help="counter: distinct names left out since start because InfluxDB cannot store them (tag keys and values, field keys, measurements; each also warned once in the log)",
            ),
            counter(
                "fields_over_bound_total",
                int,
                unit="fields",
                help="counter: fields left out since start by the bounds on one point: past the first 1,000 fields of a point, or the longest fields of a line over 262,144 bytes (each measurement warned once in the log)",
            ),
            counter(
                "points_unwritable_total",
                int,
                unit="points",
                help="counter: points a line-protocol sink (file, InfluxDB) could not write since start, because no line could be made of them (a refused measurement name, or every field refused)",
            ),
        ),
        part="agent",
        source_column=None,
    ),
)
