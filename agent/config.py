"""gpuagent.toml: reading, ${VAR} expansion, validation with one-line errors."""

from __future__ import annotations

import logging
import os
import re
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuagent.collector import Collector, CollectorConfig
from gpuagent.errors import AgentError, ConfigError
from gpuagent.pipeline import names
from gpuagent.service.logsetup import mask_url
from gpuagent.sink import Sink, SinkConfig
from gpuagent.units import MIN_INTERVAL, Duration, Interval, format_duration

log = logging.getLogger("gpuagent.config")

DEFAULT_PATH = Path("/etc/gpuagent/gpuagent.toml")
ENV_VAR = "GPUAGENT_CONFIG"


def default_state_dir() -> str:
    # systemd's StateDirectory= sets STATE_DIRECTORY; a non-root run gets a per-user dir.
    if os.environ.get("STATE_DIRECTORY"):
        return os.environ["STATE_DIRECTORY"].split(":")[0]
    if os.geteuid() == 0:
        return "/var/lib/gpuagent"
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "gpuagent")


class AgentSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    interval: Interval = 10.0
    hostname: str = ""
    tags: dict[str, str] = {}
    simulate: str = ""
    seed: int = 0
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    state_dir: str = ""
    shutdown_timeout: Duration = 10.0


class PluginsSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    disabled: list[str] = []
    dir: str = ""


class CompareSection(BaseModel):
    """`[compare]`: where `gpuagent compare` and `top --fleet` read the fleet by PromQL (the
    InfluxQL path reads [sinks.influxdb]); the agent itself reads none of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    promql_url: str = ""
    scheme: Literal["auto", "influx", "prometheus"] = "auto"
    namespace: str = "gpuagent"
    timeout: Duration = 60.0
    verify_tls: bool = True
    token: str | None = None  # sent as Authorization: Bearer
    prices: dict[str, Any] = {}  # [compare.prices]: checked by gpuagent.compare.prices


class TopLevel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    agent: AgentSection = AgentSection()
    plugins: PluginsSection = PluginsSection()
    collectors: dict[str, dict[str, Any]] = {}
    sinks: dict[str, dict[str, Any]] = {}
    compare: CompareSection = CompareSection()


@dataclass
class Config:
    """A validated configuration. ``collectors`` holds every registered collector's
    config (defaults for those without a table); ``sinks`` only the configured ones."""

    path: Path | None
    agent: AgentSection
    plugins: PluginsSection
    raw: dict[str, Any]
    compare: CompareSection = field(default_factory=CompareSection)
    collectors: dict[str, CollectorConfig] = field(default_factory=dict)
    sinks: dict[str, SinkConfig] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.path) if self.path else "<defaults>"

    @property
    def hostname(self) -> str:
        return self.agent.hostname or socket.gethostname()

    @property
    def state_dir(self) -> Path:
        return Path(self.agent.state_dir or default_state_dir())


def resolve_path(path: str | Path | None) -> Path | None:
    """--config, else $GPUAGENT_CONFIG, else /etc/gpuagent/gpuagent.toml if it exists, else none."""
    if path:
        return Path(path)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return DEFAULT_PATH if DEFAULT_PATH.exists() else None


def read_config(path: str | Path | None) -> Config:
    """Parse and validate the host's own sections; plugin tables are checked by ``bind``."""
    resolved = resolve_path(path)
    raw: dict[str, Any] = {}
    label = str(resolved) if resolved else "<defaults>"
    if resolved is not None:
        raw = _load_toml(resolved)
        raw = _expand(raw, label, ())
    try:
        top = TopLevel.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{label}: {format_validation_error(exc)}") from None
    _check_agent(top.agent, label)
    if top.compare.prices:
        from gpuagent.compare.prices import parse_prices

        parse_prices(top.compare.prices, label)  # a wrong price is one line at `config check` too
    return Config(path=resolved, agent=top.agent, plugins=top.plugins, raw=raw, compare=top.compare)


def _check_agent(agent: AgentSection, label: str) -> None:
    """What the model cannot see: tags InfluxDB would refuse, a SPEC that would not start."""
    for key, value in agent.tags.items():
        problem = names.tag_key_problem(key)
        if problem:
            raise ConfigError(f"{label}: agent.tags: tag key {key[:100]!r} {problem}")
        problem = names.tag_value_problem(value)
        if problem:
            raise ConfigError(f"{label}: agent.tags.{key}: value {value[:100]!r} {problem}")
    if agent.hostname:
        problem = names.tag_value_problem(agent.hostname)
        if problem:
            raise ConfigError(f"{label}: agent.hostname: {agent.hostname[:100]!r} {problem}")
    size = sum(len(f",{k}={v}".encode()) for k, v in agent.tags.items()) + len(agent.hostname.encode())
    if size > names.MAX_SERIES_KEY_BYTES // 2:
        raise ConfigError(
            f"{label}: agent.tags: {size} bytes of tags on every point; InfluxDB allows "
            f"{names.MAX_SERIES_KEY_BYTES} for measurement and all tags together"
        )
    if agent.simulate:
        from gpuagent.sim.fleet import parse_spec

        try:
            parse_spec(agent.simulate)
        except AgentError as exc:
            raise ConfigError(f"{label}: agent.simulate: {exc}") from None


def bind(
    config: Config, collectors: dict[str, type[Collector]], sinks: dict[str, type[Sink]], failed_plugins=()
) -> Config:
    """Validate each [collectors.NAME] / [sinks.NAME] table with its plugin's own model."""
    label = config.label
    tables = config.raw.get("collectors", {})
    for name in tables:
        if name not in collectors:
            _unknown(config, "collectors", name, collectors, failed_plugins)
    for name, cls in collectors.items():
        config.collectors[name] = _validate(cls.Config, tables.get(name, {}), label, ("collectors", name))
        interval = getattr(config.collectors[name], "interval", None)
        if interval is not None and interval < MIN_INTERVAL:
            raise ConfigError(
                f"{label}: collectors.{name}.interval: expected at least {format_duration(MIN_INTERVAL)} "
                f"(the floor for intervals), got {format_duration(interval)}"
            )
    sink_tables = config.raw.get("sinks", {})
    for name, table in sink_tables.items():
        if name not in sinks:
            _unknown(config, "sinks", name, sinks, failed_plugins)
            continue
        config.sinks[name] = _validate(sinks[name].Config, table, label, ("sinks", name))
    return config


def _unknown(config: Config, kind: str, name: str, known: dict, failed_plugins) -> None:
    msg = f"{config.label}: {kind}.{name}: unknown {kind[:-1]} (known: {', '.join(sorted(known)) or 'none'})"
    if failed_plugins:
        # Its plugin may be the one that failed to load: run the rest, say so.
        config.warnings.append(msg + "; ignored, since a plugin that may provide it failed to load or is disabled")
        return
    raise ConfigError(msg)


def _validate(model: type[BaseModel], table: Any, label: str, loc: tuple[str, ...]):
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        raise ConfigError(f"{label}: {format_validation_error(exc, loc)}") from None


def _load_toml(path: Path) -> dict[str, Any]:
    label = str(path)
    from gpuagent.service import toml_bound

    try:
        data = toml_bound.read(path)
    except toml_bound.TomlBoundError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except PermissionError:
        raise ConfigError(f"{path}: permission denied") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    try:
        raw = toml_bound.loads(text)
    except toml_bound.TomlBoundError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: TOML syntax error: {exc}") from None
    if not raw:
        raise ConfigError(f"{label}: no settings in the file (`gpuagent config init` writes a commented default)")
    return raw


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, label: str, loc: tuple[str, ...]) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string from the environment."""
    if isinstance(value, dict):
        return {k: _expand(v, label, (*loc, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, label, (*loc, str(i))) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{label}: {'.'.join(loc)}: environment variable {name} is not set")

        return _VAR.sub(sub, value)
    return value


# -- one-line error messages --------------------------------------------------

_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
}


# A key that may hold a secret: its value is never shown, whatever its type.
_SECRET_KEY = re.compile(r"pass(word|wd|phrase)?$|token|secret|credential|api_?key|private_?key", re.IGNORECASE)


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


def format_validation_error(exc: ValidationError, prefix: tuple[str, ...] = ()) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = ".".join(str(p) for p in (*prefix, *first["loc"]))
    kind = first["type"]
    secret = any(is_secret_key(p) for p in first["loc"])
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing":
        msg = "required key is missing"
    elif kind == "value_error":
        msg = first["msg"].removeprefix("Value error, ")
        if secret:
            msg = "invalid value (not shown: it may be a secret)"
    else:
        expected = _EXPECTED.get(kind) or first["msg"].replace("Input should be", "expected")
        shown = f"a {_type_name(first.get('input'))} (value not shown)" if secret else show_value(first.get("input"))
        msg = f"{expected}, got {shown}"
    msg = mask_url(msg)
    more = len(errors) - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{loc}: {msg}{suffix}" if loc else f"{msg}{suffix}"


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", dict: "table", list: "array"}.get(
        type(value), type(value).__name__
    )


def show_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)
