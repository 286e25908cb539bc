"""Config validation: each mistake gives one line naming the file and the key."""

import os
import stat

import pytest

from conftest import run_cli
from gpuagent.config import read_config
from gpuagent.errors import ConfigError
from gpuagent.units import parse_duration

# (name, file text or None for "no file", expected substring of the one-line error)
MALFORMED = [
    ("toml-syntax", "[agent\ninterval = 1", "gpuagent.toml: TOML syntax error"),
    ("toml-dup-key", "[agent]\ninterval = 1\ninterval = 2", "TOML syntax error"),
    ("toml-bad-string", '[agent]\nhostname = "unterminated', "TOML syntax error"),
    ("empty-file", "", "gpuagent.toml: no settings in the file"),
    ("only-comments", "# nothing here\n", "no settings in the file"),
    ("unknown-top-level", "[agnet]\ninterval = 1", "gpuagent.toml: agnet: unknown key"),
    ("unknown-agent-key", "[agent]\nintervall = 1", "gpuagent.toml: agent.intervall: unknown key"),
    ("unknown-plugins-key", "[plugins]\ndisable = []", "gpuagent.toml: plugins.disable: unknown key"),
    ("unknown-collector-key", "[collectors.host]\nfoo = 1", "gpuagent.toml: collectors.host.foo: unknown key"),
    ("unknown-collector", "[collectors.nosuch]\nenabled = true", "gpuagent.toml: collectors.nosuch: unknown collector"),
    ("unknown-sink", "[sinks.nosuch]\nenabled = true", "gpuagent.toml: sinks.nosuch: unknown sink"),
    ("unknown-sink-key", '[sinks.file]\npath = "-"\nmode = "x"', "gpuagent.toml: sinks.file.mode: unknown key"),
    (
        "bad-duration-word",
        '[collectors.host]\ninterval = "fast"',
        'gpuagent.toml: collectors.host.interval: expected a duration, got "fast"',
    ),
    (
        "unitless-duration-string",
        '[agent]\ninterval = "10"',
        'agent.interval: expected a duration with a unit such as "10s", got "10"',
    ),
    ("negative-duration", "[agent]\ninterval = -5", "agent.interval: expected a positive duration, got -5"),
    (
        "negative-duration-string",
        '[agent]\ninterval = "-5s"',
        'agent.interval: expected a positive duration, got "-5s"',
    ),
    ("zero-duration", "[collectors.host]\ninterval = 0", "collectors.host.interval: expected a positive duration"),
    ("bool-duration", "[agent]\nshutdown_timeout = true", "agent.shutdown_timeout: expected a duration, got true"),
    ("bad-unit", '[agent]\ninterval = "10 parsecs"', "agent.interval: expected a duration"),
    ("duration-array", "[agent]\ninterval = [1]", "agent.interval: expected a duration"),
    ("interval-table", "[agent.interval]\nx = 1", "agent.interval: expected a duration"),
    ("hostname-int", "[agent]\nhostname = 5", "agent.hostname: expected a string, got 5"),
    ("seed-string", '[agent]\nseed = "x"', 'agent.seed: expected an integer, got "x"'),
    ("seed-float", "[agent]\nseed = 1.5", "agent.seed: expected an integer, got 1.5"),
    (
        "log-level",
        '[agent]\nlog_level = "loud"',
        "agent.log_level: expected 'debug', 'info', 'warning' or 'error', got \"loud\"",
    ),
    ("log-format", '[agent]\nlog_format = "xml"', "agent.log_format: expected 'text' or 'json'"),
    ("tags-not-table", '[agent]\ntags = "dc=1"', 'agent.tags: expected a table, got "dc=1"'),
    ("tag-value-int", "[agent.tags]\ndc = 1", "agent.tags.dc: expected a string, got 1"),
    ("disabled-not-array", '[plugins]\ndisabled = "host"', 'plugins.disabled: expected an array, got "host"'),
    ("disabled-int-item", "[plugins]\ndisabled = [1]", "plugins.disabled.0: expected a string, got 1"),
    ("collectors-not-table", "collectors = 5", "collectors: expected a table, got 5"),
    ("collector-not-table", "[collectors]\nhost = 1", "collectors.host: expected a table, got 1"),
    (
        "enabled-string",
        '[collectors.host]\nenabled = "yes"',
        'collectors.host.enabled: expected true or false, got "yes"',
    ),
    ("per-cpu-string", '[collectors.host]\nper_cpu = "x"', 'collectors.host.per_cpu: expected true or false, got "x"'),
    ("timeout-word", '[collectors.host]\ntimeout = "soon"', 'collectors.host.timeout: expected a duration, got "soon"'),
    ("sink-path-int", "[sinks.file]\npath = 3", "sinks.file.path: expected a string, got 3"),
    ("sink-not-table", "[sinks]\nfile = true", "sinks.file: expected a table, got true"),
    (
        "env-unset",
        '[agent]\nhostname = "${GPUAGENT_TEST_SURELY_UNSET}"',
        "agent.hostname: environment variable GPUAGENT_TEST_SURELY_UNSET is not set",
    ),
    ("several-errors", '[agent]\ninterval = "x"\nseed = "y"', "(and 1 more error)"),
    ("not-utf8", b'[agent]\nhostname = "\xff"\n', "gpuagent.toml: not UTF-8 text"),
    # Intervals below the documented floor (100ms) flood CPU and log.
    ("interval-1ns", '[agent]\ninterval = "1ns"', "agent.interval: expected at least 100ms (the floor for intervals)"),
    ("interval-1ms", '[agent]\ninterval = "1ms"', "agent.interval: expected at least 100ms"),
    (
        "collector-interval-1ms",
        '[collectors.host]\ninterval = "1ms"',
        "collectors.host.interval: expected at least 100ms",
    ),
    (
        "flush-interval-1ms",
        '[sinks.influxdb]\napi = "v1"\ndatabase = "d"\nflush_interval = "1ms"',
        "sinks.influxdb.flush_interval: expected at least 100ms",
    ),
    (
        "simulate-count-0",
        '[agent]\nsimulate = "h100-sxm:0"',
        "agent.simulate: bad simulator SPEC item 'h100-sxm:0': COUNT must be 1..",
    ),
    # Tags InfluxDB would refuse: refused here, not on every point.
    (
        "tag-trailing-backslash",
        "[agent.tags]\nshare = '\\\\fileserver\\gpu\\'",
        "agent.tags.share: value '\\\\\\\\fileserver\\\\gpu\\\\' ends with a backslash",
    ),
    ("tag-empty-key", '[agent.tags]\n"" = "x"', "agent.tags: tag key '' empty"),
    (
        "tag-key-time",
        '[agent.tags]\ntime = "x"',
        "agent.tags: tag key 'time' is reserved by InfluxDB",
    ),  # once, not 'time' 'time'
    ("tag-value-70000", '[agent.tags]\nbig = "' + "x" * 70000 + '"', "agent.tags.big: value 'xxxx"),
    ("tag-value-newline", '[agent.tags]\nnote = "a\\nb"', "agent.tags.note: value 'a\\nb' contains a line break"),
    ("hostname-backslash", '[agent]\nhostname = "node\\\\"', "agent.hostname: 'node\\\\' ends with a backslash"),
    # TOML bombs (issue 46): tomllib recursed into a traceback, or kept n²/2 key parts.
    ("toml-deep", "a = " + "[" * 100_000 + "]" * 100_000, "nested more than 32 deep (line 1)"),
    ("toml-dotted-key", "[agent]\n" + "a" + ".a" * 5000 + " = 1", "a key of more than 32 dotted parts (line 2)"),
    ("toml-large", "#" * (2 << 20), "larger than 1 MiB: not a config file"),
    # What only failed at start, or never (issue 46): `config check` refuses it.
    ("expected-gpus-negative", "[collectors.health]\nexpected_gpus = -1", "expected_gpus: expected a count from 1"),
    ("expected-gpus-zero", "[collectors.health]\nexpected_gpus = 0", "expected_gpus: expected a count from 1"),
    (
        "endpoint-file-url",
        '[collectors.work]\nendpoints = [{url = "file:///etc/shadow", gpus = ["0"]}]',
        "collectors.work.endpoints.0.url: expected http://HOST:PORT/PATH or https://HOST:PORT/PATH, got 'file:///etc",
    ),
    (
        "endpoint-unix-url",
        '[collectors.work]\nendpoints = [{url = "unix:///run/vllm.sock", gpus = ["0"]}]',
        "got 'unix:///run/vllm.sock'",
    ),
]


@pytest.mark.parametrize("name,text,expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_config_gives_one_line(invoke, tmp_path, name, text, expected):
    path = tmp_path / "gpuagent.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    result = invoke("config", "check", str(path))
    assert result.exit_code == 1, result.output
    err = result.stderr.strip()
    assert err.count("\n") == 0, f"more than one line: {err!r}"
    assert "Traceback" not in result.output
    assert expected in err, err


def test_missing_file(invoke, tmp_path):
    result = invoke("config", "check", str(tmp_path / "nope.toml"))
    assert result.exit_code == 1
    assert result.stderr.strip() == f"gpuagent: error: {tmp_path / 'nope.toml'}: file not found"


def test_directory_instead_of_file(invoke, tmp_path):
    result = invoke("run", "--once", "--test", "--config", str(tmp_path))
    assert result.exit_code in (1, 2)
    assert "Traceback" not in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; unreadable files cannot be made")
def test_unreadable_file(invoke, tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text("[agent]\ninterval = 1\n")
    path.chmod(0)
    result = invoke("config", "check", str(path))
    assert result.exit_code == 1 and "permission denied" in result.stderr


def test_unreadable_file_via_directory_permissions(tmp_path):
    """Unreadable even for root: a FIFO-free trick is not available, so use a path through a file."""
    path = tmp_path / "afile" / "gpuagent.toml"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="cannot read|not a directory|file not found"):
        read_config(path)


def test_env_expansion_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUAGENT_TEST_HOST", "node-7")
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\nhostname = "${GPUAGENT_TEST_HOST}"\n[agent.tags]\ndc = "${GPUAGENT_TEST_DC:-ams1}"\n')
    cfg = read_config(path)
    assert cfg.agent.hostname == "node-7"
    assert cfg.agent.tags == {"dc": "ams1"}


def test_config_env_var_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "site.toml"
    path.write_text('[agent]\ninterval = "2s"\n')
    monkeypatch.setenv("GPUAGENT_CONFIG", str(path))
    assert read_config(None).agent.interval == 2.0


@pytest.mark.parametrize(
    "text,seconds",
    [
        (5, 5.0),
        (0.25, 0.25),
        ("500ms", 0.5),
        ("10s", 10.0),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_config_check_ok(invoke, tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\ninterval = "1s"\n[collectors.host]\nper_cpu = true\n')
    result = invoke("config", "check", str(path))
    assert result.exit_code == 0, result.output
    assert "ok" in result.stdout and "host" in result.stdout


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_config_init_writes_a_file_that_checks(invoke, tmp_path):
    path = tmp_path / "etc" / "gpuagent.toml"
    assert invoke("config", "init", str(path)).exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) & 0o777 == 0o644 & ~_umask()
    check = invoke("config", "check", str(path))
    assert check.exit_code == 0, check.output
    again = invoke("config", "init", str(path))
    assert again.exit_code == 1 and "exists" in again.stderr


@pytest.mark.parametrize("where", ["proc", "under-a-file"])
@pytest.mark.slow
def test_config_init_on_a_path_it_cannot_write_is_one_line(tmp_path, where):
    """Root writes almost anywhere: /proc refuses every new file, and a file cannot hold one."""
    (tmp_path / "afile").write_text("x")
    path = "/proc/gpuagent-x.toml" if where == "proc" else str(tmp_path / "afile" / "gpuagent.toml")
    proc = run_cli("config", "init", path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuagent: error: ") and "cannot write" in lines[0], proc.stderr
    assert ("/proc/gpuagent-x.toml" if where == "proc" else str(tmp_path / "afile")) in lines[0]


def test_config_init_comments_name_every_value_that_is_not_the_built_in_default(invoke):
    """A key `config init` sets to something other than its model's default says so in its
    comment (`built-in default ...`), and no comment calls the table it writes the default."""
    import tomllib

    from gpuagent.plugin_host import PluginHost

    text = invoke("config", "init").stdout
    doc = tomllib.loads(text)
    host = PluginHost(load_entry_points=False).load()
    models = {("sinks", n): c.Config for n, c in host.sinks.items()}
    models.update({("collectors", n): c.Config for n, c in host.collectors.items()})
    lines = {
        line.split("=", 1)[0].strip(): line for line in text.splitlines() if "=" in line and not line.startswith("#")
    }
    checked = 0
    for kind in ("sinks", "collectors"):
        for name, table in doc.get(kind, {}).items():
            written = models[(kind, name)].model_validate(table)
            default = models[(kind, name)]()
            for key in table:
                if getattr(written, key) != getattr(default, key):
                    checked += 1
                    comment = lines[key].partition("#")[2]
                    assert "built-in default" in comment, (
                        f"{kind}.{name}.{key}: differs from its default without saying so"
                    )
    assert checked >= 2  # [sinks.file] path and keep
    assert "The default sink when" not in text


def test_shipped_default_config_is_what_init_writes(invoke):
    from conftest import REPO

    shipped = (REPO / "config" / "gpuagent.toml").read_text()
    assert invoke("config", "init").stdout == shipped, "regenerate with: gpuagent config init > config/gpuagent.toml"


def test_config_show_round_trips(invoke, tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\ninterval = "2s"\n[agent.tags]\ndc = "x y"\n')
    shown = invoke("config", "show", str(path))
    assert shown.exit_code == 0, shown.output
    again = tmp_path / "again.toml"
    again.write_text(shown.stdout)
    cfg = read_config(again)
    assert cfg.agent.interval == 2.0 and cfg.agent.tags == {"dc": "x y"}


def test_subprocess_error_has_no_traceback(tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[collectors.host]\ninterval = "fast"\n')
    proc = run_cli("run", "--once", "--test", "--config", str(path))
    assert proc.returncode == 1
    # The full path: an operator with several configs must know which one is wrong.
    assert proc.stderr.strip() == f'gpuagent: error: {path}: collectors.host.interval: expected a duration, got "fast"'
    assert proc.stdout == ""


def test_usage_error_exit_code_2():
    proc = run_cli("run", "--bogus")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


NUMBER_SECRET = "31415926535"


@pytest.mark.parametrize(
    "table",
    [
        f'[sinks.influxdb]\napi = "v1"\ndatabase = "d"\nusername = "u"\npassword = {NUMBER_SECRET}\n',
        f'[sinks.influxdb]\nbucket = "b"\ntoken = {NUMBER_SECRET}\n',
        f'[sinks.influxdb]\nbucket = "b"\ntoken = [{NUMBER_SECRET}]\n',
        f'[sinks.influxdb]\nbucket = "b"\ntoken = {{ value = {NUMBER_SECRET} }}\n',
    ],
)
def test_a_secret_of_the_wrong_type_is_never_echoed(invoke, tmp_path, table):
    path = tmp_path / "gpuagent.toml"
    path.write_text(table)
    result = invoke("config", "check", str(path))
    assert result.exit_code == 1
    assert NUMBER_SECRET not in result.output
    assert "sinks.influxdb." in result.stderr and "not shown" in result.stderr, result.stderr


def test_credentials_in_a_url_are_masked_by_config_show(invoke, tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[sinks.influxdb]\nurl = "http://admin:S3CRET-PW@127.0.0.1:8086"\napi = "v1"\ndatabase = "d"\n')
    shown = invoke("config", "show", str(path))
    assert shown.exit_code == 0, shown.output
    assert "S3CRET-PW" not in shown.output and 'url = "http://admin:***@127.0.0.1:8086"' in shown.stdout


@pytest.mark.slow
def test_run_once_test_into_a_closed_pipe_exits_quietly(tmp_path):
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--simulate", "h100-sxm:8", "--once", "--test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    first = proc.stdout.readline()  # `| head -1`: one line read, then the reader leaves
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0
    assert first.startswith(b"gpu_") or first.startswith(b"host")
    # Only the NVML error policy's once-per-GPU notes (the h100-sxm profile is driver 590: its
    # applications clocks answer DEPRECATED); nothing about the closed pipe.
    noise = [line for line in err.splitlines() if " INFO gpuagent.gpus.gpu: " not in line]
    assert noise == [], err


def test_log_lines_never_carry_credentials_inside_a_url():
    import logging

    from gpuagent.service.logsetup import make_formatter

    record = logging.LogRecord(
        "gpuagent.x", logging.ERROR, __file__, 1, "cannot reach %s", ("https://admin:S3CRET@db:8086/write",), None
    )
    for fmt, journal in (("text", False), ("text", True), ("json", False)):
        line = make_formatter(fmt, journal=journal).format(record)
        assert "S3CRET" not in line and "admin:***@db:8086" in line, line


@pytest.mark.parametrize(
    ("table", "error"),
    [
        (
            '[sinks.influxdb]\napi = "v1"\ndatabase = "gpu"\ntoken_file = "/nonexistent/tok"\n',
            "sinks.influxdb.token_file: cannot read /nonexistent/tok: No such file or directory",
        ),
        (
            '[sinks.influxdb]\napi = "v1"\ndatabase = "gpu"\ntoken_file = "EMPTY"\n',
            "sinks.influxdb.token_file: EMPTY is empty",
        ),
        (
            '[sinks.file]\npath = "AFILE/metrics.lp"\n',
            "sinks.file: cannot open AFILE/metrics.lp: AFILE is not a directory",
        ),
        ('[sinks.file]\npath = "TMP"\n', "sinks.file: cannot open TMP: is a directory"),
    ],
)
@pytest.mark.slow
def test_config_check_refuses_what_run_refuses_before_its_first_collection(tmp_path, table, error):
    """The README's install runs `config check` before the service starts: a config it passes
    must start. Both refuse with the same line, naming the config's full path."""
    (tmp_path / "empty.tok").write_text("")
    (tmp_path / "afile").write_text("x")
    subst = {"EMPTY": str(tmp_path / "empty.tok"), "AFILE": str(tmp_path / "afile"), "TMP": str(tmp_path)}
    for word, value in subst.items():
        table, error = table.replace(word, value), error.replace(word, value)
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\nsimulate = "l40s:1"\n' + table)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    check = run_cli("config", "check", str(path), env=env)
    assert check.returncode == 1 and check.stderr == f"gpuagent: error: {path}: {error}\n", check.stderr
    run = run_cli("run", "--once", "--config", str(path), env=env)
    assert run.returncode == 1 and run.stderr.strip().splitlines()[-1] == f"gpuagent: error: {path}: {error}", (
        run.stderr
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("influx:8086", "influx:8086"),
        ("http://influx:port", "http://influx:port"),
        ("ftp://admin:hunter2@influx:8086", "ftp://admin:***@influx:8086"),
        ("http//admin:hunter2@influx:8086", "***@influx:8086"),
    ],
)
def test_a_bad_url_is_echoed_with_its_credentials_masked(invoke, tmp_path, url, shown):
    """Like every other error, the line shows the bad value; never a password inside it."""
    path = tmp_path / "gpuagent.toml"
    path.write_text(f'[sinks.influxdb]\nurl = "{url}"\napi = "v1"\ndatabase = "gpu"\n')
    result = invoke("config", "check", str(path))
    assert result.exit_code == 1
    assert result.stderr == (
        f'gpuagent: error: {path}: sinks.influxdb: url: expected http://HOST:PORT or https://HOST:PORT, got "{shown}"\n'
    )
    assert "hunter2" not in result.stderr


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('[compare]\npromql_url = "http://vm:8428"\nschema = "influx"\n', "compare.schema: unknown key"),
        (
            '[compare]\nscheme = "graphite"\n',
            "compare.scheme: expected 'auto', 'influx' or 'prometheus', got \"graphite\"",
        ),
        ('[compare]\ntimeout = "soon"\n', "compare.timeout: "),
        ('[compare]\nverify_tls = "no"\n', 'compare.verify_tls: expected true or false, got "no"'),
        ("[compare.prices]\nkwh = -1\n", "compare.prices.kwh: expected a number >= 0, got -1"),
    ],
)
def test_config_check_types_the_compare_table(invoke, tmp_path, table, error):
    # [compare] is read by `gpuagent compare` only, but `config check` is where a typo shows.
    path = tmp_path / "gpuagent.toml"
    path.write_text(table)
    check = invoke("config", "check", str(path))
    lines = check.stderr.strip().splitlines()
    assert check.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"gpuagent: error: {path}: {error}"), (
        check.stderr
    )


def test_the_compare_table_reaches_compare_typed(tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[compare]\npromql_url = "http://vm:8428/"\ntimeout = "90s"\nscheme = "influx"\n')
    from gpuagent.compare.promql import prom_connection_from

    conn = prom_connection_from(str(path), None)
    assert (conn.url, conn.timeout, conn.scheme, conn.namespace) == ("http://vm:8428", 90.0, "influx", "gpuagent")


def test_config_check_warns_about_a_secret_others_may_read_as_run_does(tmp_path):
    path = tmp_path / "gpuagent.toml"
    path.write_text('[sinks.influxdb]\napi = "v2"\nbucket = "b"\norg = "o"\ntoken = "s3cr3t-token-value"\n')
    path.chmod(0o644)
    proc = run_cli("config", "check", str(path))
    assert proc.returncode == 0, proc.stderr
    assert f"{path} is readable by other users and holds an InfluxDB secret: chmod 600" in proc.stderr
    assert "s3cr3t" not in proc.stderr + proc.stdout
    path.chmod(0o600)
    assert "readable" not in run_cli("config", "check", str(path)).stderr
