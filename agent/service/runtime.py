"""Building a running agent from a config: plugins, NVML, collectors, sinks, scheduler."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from gpuagent.collector import Collector
from gpuagent.config import Config, bind, format_validation_error, read_config
from gpuagent.context import AgentContext
from gpuagent.errors import AgentError, ConfigError, NvmlUnavailable
from gpuagent.gpus.nvml import NvmlSession, open_nvml
from gpuagent.plugin_host import PluginHost, load_host
from gpuagent.service.logsetup import stream_is_journal
from gpuagent.service.scheduler import Scheduler
from gpuagent.sink import Sink

log = logging.getLogger("gpuagent")


@dataclass
class Options:
    """What the command line adds to (or overrides in) the config file."""

    config_path: str | Path | None = None
    simulate: str | None = None
    seed: int | None = None
    test: bool = False  # print line protocol on stdout instead of the configured sinks
    plugins_dir: str | None = None
    extra_disabled: tuple[str, ...] = ()
    sinks: bool = True  # False: no sinks (`gpuagent top` reads the points run_once returns)


def load_plugins(config: Config, options: Options) -> PluginHost:
    return load_host(config, plugins_dir=options.plugins_dir, extra_disabled=options.extra_disabled)


def load(options: Options) -> tuple[Config, PluginHost]:
    """Read and fully validate the config (host sections and every plugin table)."""
    config = read_config(options.config_path)
    host = load_plugins(config, options)
    # A failed or disabled plugin's table is a warning, not a refusal to start: disabling a
    # plugin must not mean editing the rest of the config.
    not_loaded = [p for p in host.plugins.values() if p.status != "loaded"]
    bind(config, host.collectors, host.sinks, failed_plugins=not_loaded)
    for warning in config.warnings:
        log.warning("%s", warning)
    return config, host


def check_sinks(config: Config, plugins: PluginHost) -> None:
    """What the configured sinks' start() would refuse (a token_file run cannot read, a
    folder it cannot write), found without starting them: `gpuagent config check` runs the
    check half of _start_sink, so a config that checks is one that starts."""
    context = AgentContext(
        hostname=config.hostname,
        global_tags=dict(config.agent.tags),
        state_dir=config.state_dir,
        config_path=config.path,
    )
    for name, cfg in config.sinks.items():
        if cfg.enabled:
            _checked_sink(config, plugins, context, name, cfg)


def _checked_sink(config, plugins, context, name, cfg) -> Sink:
    """The sink, constructed and checked (not started); its refusal names the config."""
    try:
        sink = plugins.sinks[name](cfg, context)
        sink.check()
    except AgentError as exc:
        raise type(exc)(f"{config.label}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{config.label}: sinks.{name}: {exc}") from None
    except Exception as exc:  # a bad plugin: one line, never a traceback
        raise AgentError(f"sink {name} failed to start: {type(exc).__name__}: {exc}") from None
    return sink


@dataclass
class Agent:
    config: Config
    plugins: PluginHost
    context: AgentContext
    collectors: list[Collector]
    sinks: list[Sink]
    scheduler: Scheduler
    nvml: NvmlSession | None = None
    options: Options = field(default_factory=Options)

    def close(self, flush_timeout: float | None = None) -> None:
        timeout = self.config.agent.shutdown_timeout if flush_timeout is None else flush_timeout
        self.scheduler.close(timeout)
        if self.nvml:
            self.nvml.close()
            self.nvml = None


def build(
    options: Options,
    config: Config | None = None,
    plugins: PluginHost | None = None,
    nvml: NvmlSession | None = None,
    liveness=None,
) -> Agent:
    """Everything short of running: raises AgentError with one line on any problem.
    `liveness`: a reload's, kept from the running agent, so that the new sinks' /readyz and
    /healthz answer as the old ones did from their first request."""
    if config is None or plugins is None:
        config, plugins = load(options)
    simulate = options.simulate or config.agent.simulate or None
    seed = options.seed if options.seed is not None else config.agent.seed
    enabled = {n: c for n, c in config.collectors.items() if c.enabled}
    context = AgentContext(
        hostname=config.hostname,
        global_tags=dict(config.agent.tags),
        state_dir=config.state_dir,
        config_path=config.path,
    )
    if liveness is not None:
        context.liveness = liveness
    owns_nvml = nvml is None
    if nvml is None:
        try:
            nvml = open_nvml(simulate, seed=seed)
        except NvmlUnavailable:
            needing = sorted(n for n in enabled if plugins.collectors[n].requires_gpus)
            if needing:
                raise
            log.warning("no NVIDIA driver; running collectors that need no GPU only")
    if nvml is not None:
        context.nvml = nvml
        context.gpus = nvml.gpus
    failed: dict[str, str] = {}
    try:
        collectors = _make_collectors(config, plugins, context, enabled, failed)
        sinks = make_sinks(config, plugins, context, options)
    except BaseException:
        if owns_nvml and nvml is not None:
            nvml.close()
        raise
    entries = []
    for c in collectors:
        cfg = c.config
        interval = cfg.interval or c.default_interval or config.agent.interval
        entries.append((c, interval, cfg.timeout or interval))
    scheduler = Scheduler(context, entries, sinks, config.agent.interval, failed_collectors=failed)
    scheduler.fold_nvml_errors = bool(options.test)  # what --test prints stays readable
    return Agent(config, plugins, context, collectors, sinks, scheduler, nvml, options)


def _make_collectors(config, plugins, context, enabled, failed: dict[str, str]) -> list[Collector]:
    """The enabled collectors. A config rejection stops the start (the operator must fix it); any
    other failure costs that collector alone, kept in ``failed`` (name -> why) and reported."""
    out = []
    for name, cfg in enabled.items():
        cls = plugins.collectors[name]
        try:
            out.append(cls(cfg, context))
        except (ConfigError, ValueError, TypeError) as exc:
            owner = plugins.owner_of("collectors", name)
            # One line, whatever the plugin raised (a pydantic ValidationError is a multi-line ValueError).
            detail = format_validation_error(exc) if isinstance(exc, ValidationError) else str(exc).strip()
            detail = (detail.splitlines() or [type(exc).__name__])[0]
            raise ConfigError(
                f"{config.label}: collectors.{name}: rejected by plugin {owner.name if owner else '?'}: {detail}"
            ) from None
        except AgentError:
            raise
        except Exception as exc:  # a bad plugin must never take the agent down
            owner = plugins.owner_of("collectors", name)
            reason = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]
            failed[name] = f"failed to start: {reason}"
            log.error(
                "collector %s (plugin %s) failed to start: %s; running without it",
                name,
                owner.name if owner else "?",
                reason,
            )
    return out


def make_sinks(config, plugins, context, options) -> list[Sink]:
    """The sinks `options` asks for, started: none without options.sinks, the file sink on stdout for
    --test or when none is configured, else every enabled one of the config (if one fails to start,
    those started before it are closed again)."""
    if not options.sinks:
        return []
    if options.test:
        if "file" not in plugins.sinks:
            raise AgentError("--test prints through the file sink, and the file plugin is not loaded")
        file_sink = plugins.sinks["file"]
        sink = file_sink(file_sink.Config(path="-"), context)
        sink.start()
        return [sink]
    configured = {n: c for n, c in config.sinks.items() if c.enabled}
    if not configured:
        # Nothing configured: line protocol on stdout, so a first run shows something.
        if "file" not in plugins.sinks:
            raise AgentError("no sink is configured and the file sink is not loaded")
        configured = {"file": plugins.sinks["file"].Config(path="-")}
        if stream_is_journal(sys.stdout):
            log.warning(
                "no [sinks.*] table in the config: line protocol goes to stdout, which is the journal here; "
                "configure a sink (`gpuagent config init` writes a config with a file sink)"
            )
    out = []
    try:
        for name, cfg in configured.items():
            out.append(_start_sink(config, plugins, context, name, cfg))
    except BaseException:
        # Close the ones already started (files, threads, ports): a failed reload must not leak them.
        for sink in out:
            try:
                sink.close()
            except Exception as exc:
                log.error("sink %s: close failed: %s", sink.name, exc)
        raise
    return out


def _start_sink(config, plugins, context, name, cfg) -> Sink:
    sink = _checked_sink(config, plugins, context, name, cfg)
    try:
        sink.start()
    except AgentError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{config.label}: sinks.{name}: {exc}") from None
    except Exception as exc:
        raise AgentError(f"sink {name} failed to start: {type(exc).__name__}: {exc}") from None
    return sink
