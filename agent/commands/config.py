"""gpuagent config check | show | init."""

from __future__ import annotations

import os
from pathlib import Path

import click

from gpuagent.config import is_secret_key
from gpuagent.errors import AgentError
from gpuagent.service.logsetup import mask_url
from gpuagent.service.runtime import Options, check_sinks, load


@click.group()
def config():
    """Check, show or write the configuration."""


@config.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--plugins-dir", type=click.Path(file_okay=False, exists=True))
def check(file, plugins_dir):
    """Validate FILE (every table, plugins' included, and what the sinks need at start:
    files to read, folders to write); exit 1 with one line if it is wrong."""
    cfg, host = load(Options(config_path=file, plugins_dir=plugins_dir))
    check_sinks(cfg, host)
    enabled = sorted(n for n, c in cfg.collectors.items() if c.enabled)
    sinks = sorted(n for n, c in cfg.sinks.items() if c.enabled) or ["file (stdout, default)"]
    where = str(cfg.path) if cfg.path else "built-in defaults"
    click.echo(f"{where}: ok; collectors: {', '.join(enabled)}; sinks: {', '.join(sinks)}")


@config.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--plugins-dir", type=click.Path(file_okay=False, exists=True))
def show(file, plugins_dir):
    """Print the effective configuration as TOML, secrets masked."""
    cfg, host = load(Options(config_path=file, plugins_dir=plugins_dir))
    doc = {
        "agent": cfg.agent.model_dump(mode="json"),
        "plugins": cfg.plugins.model_dump(mode="json"),
        "collectors": {n: c.model_dump(mode="json") for n, c in sorted(cfg.collectors.items())},
        "sinks": {n: c.model_dump(mode="json") for n, c in sorted(cfg.sinks.items())},
    }
    click.echo(dump_toml(doc), nl=False)


@config.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def init(file, force):
    """Write a commented default config to FILE (or stdout)."""
    text = default_config_text()
    if not file:
        click.echo(text, nl=False)
        return
    path = Path(file)
    if path.exists() and not force:
        raise AgentError(f"{path}: exists; use --force to overwrite")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0644: the unit's DynamicUser must read it. It holds no secret; tokens belong in a
        # token_file or systemd credential (the influxdb sink warns if a readable file holds one).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as exc:
        where = exc.filename or path
        raise AgentError(f"{where}: cannot write: {exc.strerror or exc}") from None
    click.echo(f"wrote {path}", err=True)


AGENT_TABLE = """\
# gpuagent configuration. Durations: seconds, or a string with a unit ("500ms", "10s", "1m").
# ${VAR} in any string is replaced from the environment (${VAR:-default} too).

[agent]
interval = "10s"            # default interval of every collector (at least 100ms)
# hostname = ""             # default: the machine's hostname
# simulate = ""             # a simulated fleet instead of NVML, e.g. "l40s:2,h100-sxm:1"
# log_level = "info"        # debug | info | warning | error
# log_format = "text"       # text | json
# state_dir = ""            # spool and state; default $STATE_DIRECTORY or /var/lib/gpuagent
# shutdown_timeout = "10s"  # how long SIGTERM may take to flush

# [agent.tags]              # added to every point
# datacenter = "ams1"

[plugins]
# disabled = []             # plugin names not to load (also $GPUAGENT_DISABLE_PLUGINS, comma-separated)
# dir = ""                  # a folder of one-off .py plugin files
"""


def default_config_text() -> str:
    """The agent table plus every built-in plugin's sample table, commented where optional."""
    from gpuagent.plugin_host import builtin_names, load_host

    host = load_host(entry_points=False)
    parts = [AGENT_TABLE]
    for name in builtin_names():
        sample = host.sample_config(name)
        if sample:
            parts.append("\n" + sample.rstrip("\n") + "\n")
    return "".join(parts)


def dump_toml(doc: dict, prefix: str = "") -> str:
    """A small TOML writer for the effective config (flat scalars, arrays, nested tables)."""
    lines: list[str] = []
    scalars = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    if prefix and (scalars or not tables):
        lines.append(f"[{prefix}]")
    for key, value in scalars.items():
        if value is None:
            continue
        if is_secret_key(key) and value not in ("", [], 0):
            value = "**********"  # a plugin's secret typed as str or a number: masked like SecretStr
        lines.append(f"{_key(key)} = {_toml_value(value)}")
    if lines:
        lines.append("")
    for key, value in tables.items():
        lines.append(dump_toml(value, f"{prefix}.{_key(key)}" if prefix else _key(key)))
    return "\n".join(lines).replace("\n\n\n", "\n\n")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else '"' + key.replace('"', '\\"') + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = mask_url(str(value)).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'
