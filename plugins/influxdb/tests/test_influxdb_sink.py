"""The influxdb sink against real servers: influxd 1.x (api v1) and VictoriaMetrics (api v2)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.errors import ConfigError
from gpuagent.plugins.influxdb import InfluxDBSink, check_secret_file_permissions

pytestmark = pytest.mark.servers

TOKEN = "s3cr3t-T0KEN-do-not-leak-4242"


def fleet_points(intervals: int = 3, gpus: int = 8, start_ns: int | None = None, host: str = "node-1"):
    """Points shaped like an 8-GPU H100 run: identity tags, int/float/bool/str fields."""
    base = start_ns if start_ns is not None else (time.time_ns() // 10**9 - 120) * 10**9
    points = []
    for i in range(intervals):
        acc = Accumulator({"host": host}, time_ns=base + i * 10**9)
        for g in range(gpus):
            tags = {
                "gpu": str(g),
                "uuid": f"GPU-{g:08x}-1111-2222-3333-444455556666",
                "model": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0",
                "arch": "Hopper",
            }
            acc.add_fields(
                "gpu_power",
                {"power_w": 300.25 + g + i / 8, "energy_j": 1e6 + i * 700.5 + g, "power_limit_w": 700},
                tags=tags,
            )
            acc.add_fields(
                "gpu_clocks",
                {"sm_clock_mhz": 1980 - g, "mem_clock_mhz": 2619, "throttled": (i + g) % 2 == 0, "pstate": f"P{g % 3}"},
                tags=tags,
            )
            acc.add_fields(
                "gpu_memory", {"fb_used_bytes": 2**30 * (g + 1) + i, "dram_bw_util_pct": 12.5 * (g % 8)}, tags=tags
            )
        points.extend(acc.points)
    return points


def make_sink(tmp_path: Path, config_path: Path | None = None, **options) -> InfluxDBSink:
    options.setdefault("flush_interval", "100ms")
    options.setdefault("flush_jitter", 0)
    options.setdefault("retry_initial_backoff", "100ms")
    options.setdefault("retry_max_backoff", "300ms")
    options.setdefault("timeout", "3s")
    config = InfluxDBSink.Config.model_validate(options)
    context = AgentContext(hostname="node-1", state_dir=tmp_path / "state", config_path=config_path)
    sink = InfluxDBSink(config, context)
    sink.start()
    return sink


def wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stored_v1(server, measurement: str, db: str | None = None) -> dict[tuple, dict]:
    rows = server.points(f'SELECT * FROM "{measurement}" GROUP BY *', db)
    return {(r["time"], r["gpu"], r["host"]): r for r in rows}


INFLUX_TYPES = {bool: "boolean", int: "integer", float: "float", str: "string"}


def assert_all_in_v1(server, points, db: str | None = None):
    """Every point stored: same tags, same values, and each field with its own type."""
    by_measurement: dict[str, dict] = {}
    types = {(s["name"], key): kind for s in server.query("SHOW FIELD KEYS", db) for key, kind in s["values"]}
    for p in points:
        if p.measurement not in by_measurement:
            by_measurement[p.measurement] = stored_v1(server, p.measurement, db)
        row = by_measurement[p.measurement].get((p.time_ns, p.tags["gpu"], p.tags["host"]))
        assert row is not None, f"missing from InfluxDB: {p.to_line()}"
        for key, value in p.fields.items():
            # JSON writes 1e6 as 1000000: the stored type comes from SHOW FIELD KEYS.
            assert row[key] == value, (key, row[key], value)
            assert types[(p.measurement, key)] == INFLUX_TYPES[type(value)], (p.measurement, key)
        for key, value in p.tags.items():
            assert row[key] == value


# -- api v1 -> influxd 1.x --------------------------------------------------------------


def test_v1_every_point_of_an_8_gpu_run_is_stored_with_its_type(tmp_path, influxdb_v1):
    influxdb_v1.create_database("v1_roundtrip")
    points = fleet_points(intervals=3)
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database="v1_roundtrip", batch_size=50)
    try:
        sink.write(points)
        sink.flush(10)
        stats = sink.stats()
    finally:
        sink.close()
    assert stats["points_written_total"] == len(points) == 3 * 8 * 3
    assert stats["spool_points"] == 0 and stats["write_errors_total"] == 0
    assert_all_in_v1(influxdb_v1, points, "v1_roundtrip")
    types = {(s["name"], k): t for s in influxdb_v1.query("SHOW FIELD KEYS", "v1_roundtrip") for k, t in s["values"]}
    assert types[("gpu_clocks", "sm_clock_mhz")] == "integer"
    assert types[("gpu_clocks", "throttled")] == "boolean"
    assert types[("gpu_clocks", "pstate")] == "string"
    assert types[("gpu_power", "power_w")] == "float"


def test_v1_partial_write_drops_only_the_refused_lines(tmp_path, influxdb_v1, caplog):
    influxdb_v1.create_database("v1_partial")
    influxdb_v1.write("gpu_power,gpu=0,host=node-1 power_w=1.5 1", "v1_partial")  # power_w is a float
    good = fleet_points(intervals=1, gpus=2)
    bad = Accumulator({"host": "node-1"}, time_ns=good[0].time_ns + 1)
    bad.add_fields("gpu_power", {"power_w": 42}, tags={"gpu": "7"})  # an int: a field type conflict
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database="v1_partial")
    try:
        with caplog.at_level(logging.WARNING, logger="gpuagent"):
            sink.write(good[:3] + bad.points + good[3:])
            sink.flush(10)
        stats = sink.stats()
    finally:
        sink.close()
    assert stats["rejected_total"] == 1
    assert stats["points_written_total"] == len(good)
    assert stats["spool_points"] == 0
    assert_all_in_v1(influxdb_v1, good, "v1_partial")
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "field type conflict" in refused[0].getMessage()


def test_v1_a_request_refused_whole_is_split_until_the_bad_line_is_alone(tmp_path, influxdb_v1):
    influxdb_v1.create_database("v1_split")
    good = fleet_points(intervals=1, gpus=4)
    # Two types for one field inside one request: influxd 1.6 refuses the whole request.
    t = good[0].time_ns
    conflict = Accumulator({"host": "node-1"}, time_ns=t + 5)
    conflict.add_fields("gpu_split", {"value": 1}, tags={"gpu": "0"})
    conflict.add_fields("gpu_split", {"value": 1.5}, tags={"gpu": "1"})
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database="v1_split")
    try:
        sink.write(good + conflict.points)
        sink.flush(10)
        stats = sink.stats()
    finally:
        sink.close()
    assert stats["rejected_total"] == 1
    assert stats["points_written_total"] == len(good) + 1
    assert_all_in_v1(influxdb_v1, good, "v1_split")
    assert len(influxdb_v1.points('SELECT * FROM "gpu_split"', "v1_split")) == 1


def test_outage_spools_and_replays_everything_in_order(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    sink = make_sink(tmp_path, api="v1", url=server.url, database=server.database, batch_size=40)
    start = (time.time_ns() // 10**9 - 600) * 10**9
    batches = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(12)]
    try:
        sink.write(batches[0])
        wait_for(lambda: sink.stats()["points_written_total"] == len(batches[0]), what="first batch")
        server.stop()
        for batch in batches[1:8]:
            sink.write(batch)
            time.sleep(0.05)
        wait_for(lambda: sink.stats()["spool_points"] == 7 * len(batches[0]), what="spooling")
        assert sink.delivery.outage and "spooling" in sink.describe()
        assert sink.stats()["write_errors_total"] >= 1
        server.start()
        for batch in batches[8:]:
            sink.write(batch)
        sink.flush(10)
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="replay")
        stats = sink.stats()
    finally:
        sink.close()
    everything = [p for b in batches for p in b]
    assert_all_in_v1(server, everything)
    assert stats["replayed_total"] >= 7 * len(batches[0])
    assert stats["dropped_total"] == 0 and stats["spool_bytes"] == 0


def test_auth_errors_are_loud_and_keep_the_data_spooled(tmp_path, influxdb_v1_factory, caplog):
    server = influxdb_v1_factory(auth=True)
    points = fleet_points(intervals=1)
    sink = make_sink(
        tmp_path, api="v1", url=server.url, database=server.database, username="admin", password="wrong-password"
    )
    try:
        with caplog.at_level(logging.DEBUG):
            sink.write(points)
            sink.flush(5)
            wait_for(lambda: sink.stats()["spool_points"] == len(points), what="spooled")
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors and "401" in errors[0].getMessage() and "credentials" in errors[0].getMessage()
        assert "wrong-password" not in caplog.text
    finally:
        sink.close()
    # Fixed credentials (a restart after the operator edits the config): the spool is delivered.
    sink = make_sink(
        tmp_path, api="v1", url=server.url, database=server.database, username="admin", password="admin-pass"
    )
    try:
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="replay with good credentials")
        assert sink.stats()["replayed_total"] == len(points)
    finally:
        sink.close()
    assert_all_in_v1(server, points)


# -- api v2 -> VictoriaMetrics ------------------------------------------------------------


def test_v2_every_point_of_an_8_gpu_run_reaches_victoria_metrics(tmp_path, victoria_metrics):
    host = f"v2-{os.getpid()}-{time.monotonic_ns()}"
    points = fleet_points(intervals=3, host=host)
    sink = make_sink(tmp_path, url=victoria_metrics.url, org="fleet", bucket="gpus", token=TOKEN, batch_size=50)
    try:
        sink.write(points)
        sink.flush(10)
        stats = sink.stats()
    finally:
        sink.close()
    assert stats["points_written_total"] == len(points) and stats["spool_points"] == 0
    series = {}
    for s in victoria_metrics.export(f'{{host="{host}"}}', min_samples=3 * 8 * 9):
        m = s["metric"]
        for ts, value in zip(s["timestamps"], s["values"], strict=True):
            series[(m["__name__"], m["gpu"], ts)] = (value, m)
    fields = 0
    for p in points:
        for key, value in p.fields.items():
            fields += 1
            stored, labels = series[(f"{p.measurement}_{key}", p.tags["gpu"], p.time_ns // 10**6)]
            # VictoriaMetrics holds float64 only: ints come back exact, bools as 1/0, strings as 0.
            expected = 0.0 if isinstance(value, str) else float(value)
            assert stored == expected, (p.measurement, key, stored, value)
            assert labels["uuid"] == p.tags["uuid"] and labels["model"] == p.tags["model"]
    assert fields == len(series) == 3 * 8 * 9


def test_v2_outage_against_victoria_metrics_replays_the_spool(tmp_path, victoria_metrics_factory):
    server = victoria_metrics_factory()
    host = "v2-outage"
    start = (time.time_ns() // 10**9 - 300) * 10**9
    batches = [fleet_points(intervals=1, gpus=2, start_ns=start + i * 10**9, host=host) for i in range(6)]
    sink = make_sink(tmp_path, url=server.url, org="fleet", bucket="gpus", token=TOKEN)
    try:
        server.stop()
        for batch in batches[:3]:
            sink.write(batch)
        wait_for(lambda: sink.stats()["spool_points"] == 3 * len(batches[0]), what="spooling")
        server.start()
        for batch in batches[3:]:
            sink.write(batch)
        wait_for(lambda: sink.stats()["spool_points"] == 0 and sink.stats()["buffered_points"] == 0, what="replay")
        sink.flush(5)
    finally:
        sink.close()
    exported = {
        (s["metric"]["__name__"], s["metric"]["gpu"], ts)
        for s in server.export(f'{{host="{host}"}}', min_samples=6 * 2 * 9)
        for ts in s["timestamps"]
    }
    for p in (p for b in batches for p in b):
        for key in p.fields:
            assert (f"{p.measurement}_{key}", p.tags["gpu"], p.time_ns // 10**6) in exported


# -- secrets --------------------------------------------------------------------------------


def test_token_appears_in_no_log_line_error_or_repr(tmp_path, caplog, victoria_metrics):
    cfg_file = tmp_path / "gpuagent.toml"
    cfg_file.write_text(f'[sinks.influxdb]\nbucket = "b"\ntoken = "{TOKEN}"\n')
    cfg_file.chmod(0o644)
    with caplog.at_level(logging.DEBUG):
        # Nobody listens on this port: connection errors, retries, spooling, flush, close.
        sink = make_sink(tmp_path, config_path=cfg_file, url="http://127.0.0.1:9", bucket="b", token=TOKEN)
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 2, what="failed retries")
            sink.flush(1)
            text = repr(sink) + repr(sink.config) + str(sink.config) + sink.describe()
            text += str(sink.config.model_dump()) + str(sink.config.model_dump(mode="json"))
        finally:
            sink.close()
        try:
            InfluxDBSink.Config.model_validate({"bucket": "b", "token": TOKEN, "token_file": "/x"})
        except Exception as exc:
            text += str(exc)
    assert "spool" in caplog.text  # the failure path did log
    assert any("readable by other users" in r.getMessage() for r in caplog.records)
    assert TOKEN not in caplog.text
    assert TOKEN not in text


def test_token_file_and_permission_warning(tmp_path, victoria_metrics, caplog):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        sink = make_sink(tmp_path, url=victoria_metrics.url, bucket="b", token_file=str(token_file))
        sink.write(fleet_points(intervals=1, gpus=1))
        sink.flush(5)
        sink.close()
    assert sink.stats()["points_written_total"] == 3
    assert not caplog.records
    token_file.chmod(0o640)
    assert check_secret_file_permissions(token_file, [TOKEN], logging.getLogger("t"))
    assert not check_secret_file_permissions(token_file, ["something else"], logging.getLogger("t"))


def test_missing_token_file_is_a_one_line_config_error(tmp_path):
    config = InfluxDBSink.Config.model_validate({"bucket": "b", "token_file": str(tmp_path / "nope")})
    sink = InfluxDBSink(config, AgentContext(hostname="h", state_dir=tmp_path))
    with pytest.raises(ConfigError, match="token_file: cannot read"):
        sink.start()


@pytest.mark.parametrize(
    "table, message",
    [
        ({}, "bucket: required"),
        ({"api": "v1"}, "database: required"),
        ({"api": "v1", "database": "d", "bucket": "b"}, "for api"),
        ({"bucket": "b", "username": "u"}, "username, password"),
        ({"bucket": "b", "url": "127.0.0.1:8086"}, "url"),
        ({"bucket": "b", "batch_size": 0}, "batch_size"),
        ({"bucket": "b", "max_spool_bytes": "lots"}, "max_spool_bytes"),
        ({"bucket": "b", "flush_interval": "soon"}, "flush_interval"),
        ({"bucket": "b", "tokn": "x"}, "tokn"),
    ],
)
def test_config_errors_name_the_key(table, message):
    with pytest.raises(Exception, match=message):
        InfluxDBSink.Config.model_validate(table)


def test_config_accepts_units_and_masks_secrets():
    cfg = InfluxDBSink.Config.model_validate(
        {
            "api": "v1",
            "database": "d",
            "username": "u",
            "password": "pw-123",
            "max_spool_bytes": "64MiB",
            "flush_interval": "500ms",
            "flush_jitter": "0s",
        }
    )
    assert cfg.max_spool_bytes == 64 * 2**20 and cfg.flush_interval == 0.5 and cfg.flush_jitter == 0
    assert "pw-123" not in str(cfg.model_dump(mode="json")) and "pw-123" not in repr(cfg)


# -- spool bound and crash ----------------------------------------------------------------


def test_full_spool_drops_the_oldest_intervals_and_counts_them_exactly(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    server.stop()
    start = (time.time_ns() // 10**9 - 900) * 10**9
    intervals = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(10)]
    per_interval = len(intervals[0])  # 24 points: batch_size makes one spooled batch per interval
    one = len("\n".join(p.to_line() for p in intervals[0])) + 1
    sink = make_sink(
        tmp_path,
        api="v1",
        url=server.url,
        database=server.database,
        batch_size=per_interval,
        max_spool_bytes=int(one * 4.5),
        retry_max_backoff="10s",
        retry_initial_backoff="10s",
    )
    try:
        for n, batch in enumerate(intervals, 1):
            sink.write(batch)
            wait_for(
                lambda n=n: sink.stats()["spool_points"] + sink.stats()["dropped_total"] == n * per_interval,
                what=f"interval {n} spooled",
            )
        stats = sink.stats()
        assert stats["spool_points"] == 4 * per_interval
        assert stats["dropped_total"] == 6 * per_interval
    finally:
        sink.close()
    server.start()
    sink = make_sink(tmp_path, api="v1", url=server.url, database=server.database)
    try:
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="replay")
    finally:
        sink.close()
    assert_all_in_v1(server, [p for b in intervals[6:] for p in b])  # the newest four
    stored = server.points('SELECT count("power_w") FROM "gpu_power"')
    assert stored[0]["count"] == 4 * 8  # and nothing of the six oldest


CRASH_WRITER = r"""
import sys, time
from pathlib import Path
from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.plugins.influxdb import InfluxDBSink
url, state, base = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = InfluxDBSink.Config.model_validate({
    "api": "v1", "url": url, "database": "gpuagent", "flush_interval": "100ms", "flush_jitter": 0,
    "retry_initial_backoff": "100ms", "retry_max_backoff": "200ms", "timeout": "1s"})
sink = InfluxDBSink(cfg, AgentContext(hostname="crash", state_dir=Path(state)))
sink.start()
i = 0
while True:
    acc = Accumulator({"host": "crash"}, time_ns=base + i * 10**9)
    for g in range(8):
        acc.add_fields("gpu_power", {"power_w": 100.0 + g, "seq": i}, tags={"gpu": str(g)})
    sink.write(acc.points)
    print(i, flush=True)
    i += 1
    time.sleep(0.2)
"""


def test_kill_9_during_an_outage_loses_at_most_the_interval_in_flight(tmp_path, influxdb_v1_factory):
    import signal
    import subprocess
    import sys

    server = influxdb_v1_factory()
    server.stop()
    base = (time.time_ns() // 10**9 - 1200) * 10**9
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_WRITER, server.url, str(tmp_path / "state"), str(base)],
        stdout=subprocess.PIPE,
        text=True,
    )
    written = []
    try:
        for line in proc.stdout:
            written.append(int(line))
            if len(written) >= 10:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        written += [int(line) for line in proc.stdout.read().split()]
    assert len(written) >= 10
    server.start()
    sink = make_sink(tmp_path, api="v1", url=server.url, database=server.database)
    try:
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="replay after restart")
        assert sink.stats()["replayed_total"] >= (len(written) - 1) * 8
    finally:
        sink.close()
    rows = server.points('SELECT "seq", "gpu" FROM "gpu_power" WHERE "host" = \'crash\'')
    delivered = {(r["seq"], r["gpu"]) for r in rows}
    must = {(i, str(g)) for i in written[:-1] for g in range(8)}  # the last may have been in flight
    assert must <= delivered, sorted(must - delivered)[:10]


def test_a_reloaded_sink_replays_what_the_old_instance_spooled_after_it_opened(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    server.stop()
    start = (time.time_ns() // 10**9 - 1500) * 10**9
    intervals = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(4)]
    old = make_sink(tmp_path, api="v1", url=server.url, database=server.database)
    old.write(intervals[0])
    wait_for(lambda: old.stats()["spool_points"] == 24, what="old sink spooling")
    # A reload: the new sink opens the same spool while the old one still runs.
    new = make_sink(tmp_path, api="v1", url=server.url, database=server.database, flush_interval="200ms")
    try:
        old.write(intervals[1] + intervals[2])
        old.flush(2)
        old.close()
        server.start()
        new.write(intervals[3])
        wait_for(
            lambda: (
                new.stats()["spool_points"] == 0
                and new.stats()["buffered_points"] == 0
                and new.stats()["points_written_total"] >= 96
            ),
            what="replay of both instances' batches",
        )
    finally:
        new.close()
    assert_all_in_v1(server, [p for b in intervals for p in b])


def test_an_unusable_state_dir_starts_anyway_delivers_from_memory_and_says_so_once(tmp_path, influxdb_v1, caplog):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    influxdb_v1.create_database("no_spool")
    points = fleet_points(intervals=2)
    with caplog.at_level(logging.WARNING):
        config = InfluxDBSink.Config.model_validate(
            {"api": "v1", "url": influxdb_v1.url, "database": "no_spool", "flush_interval": "100ms", "flush_jitter": 0}
        )
        sink = InfluxDBSink(config, AgentContext(hostname="h", state_dir=blocker))
        sink.start()  # no refusal to start
        try:
            sink.write(points)
            sink.flush(10)
            stats, state = sink.stats(), sink.describe()
        finally:
            sink.close()
    assert stats["points_written_total"] == len(points) and stats["spool_writable"] == 0
    assert "delivery in memory" in state
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "memory" in errors[0] and "Not a directory" in errors[0], errors
    assert_all_in_v1(influxdb_v1, points, "no_spool")


def test_state_and_failed_writes_say_what_is_known_and_where(tmp_path, influxdb_v1, caplog):
    """Issue 29: the first status line said `influxdb ok` before any write, and the
    "write failed (connection refused)" warning did not say where to."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = make_sink(tmp_path / "down", api="v1", url=closed, database="gpuagent")
    up = make_sink(tmp_path / "up", api="v1", url=influxdb_v1.url, database=influxdb_v1.database)
    try:
        assert up.describe() == "no point written yet" and down.describe() == "no point written yet"
        with caplog.at_level(logging.WARNING, logger="gpuagent"):
            down.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: down.delivery.outage, what="the failed write")
        failed = [r.getMessage() for r in caplog.records if "write" in r.getMessage() and "failed" in r.getMessage()]
        assert failed and failed[0].startswith(f"influxdb: write to {closed} failed (connection refused)"), failed
        up.write(fleet_points(intervals=1, gpus=1))
        wait_for(lambda: up.stats()["points_written_total"] > 0, what="the first write")
        assert up.describe() == "ok"
    finally:
        down.close()
        up.close()


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_token_file_is_a_one_line_config_error(tmp_path, text):
    (tmp_path / "token").write_text(text)
    config = InfluxDBSink.Config.model_validate({"bucket": "b", "token_file": str(tmp_path / "token")})
    with pytest.raises(ConfigError, match="token_file: .* is empty"):
        config.read_token()
    sink = InfluxDBSink(config, AgentContext(hostname="h", state_dir=tmp_path))
    with pytest.raises(ConfigError, match="is empty"):
        sink.start()


def test_read_token_gives_the_token_or_the_files_stripped_contents_or_none(tmp_path):
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    assert (
        InfluxDBSink.Config.model_validate({"bucket": "b", "token_file": str(tmp_path / "token")}).read_token() == TOKEN
    )
    assert InfluxDBSink.Config.model_validate({"bucket": "b", "token": TOKEN}).read_token() == TOKEN
    assert InfluxDBSink.Config.model_validate({"bucket": "b"}).read_token() is None
