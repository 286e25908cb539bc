"""Loading plugins: the built-ins, pip-installed entry points and one-off .py files, one code path."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from gpuagent import hookspecs
from gpuagent.collector import Collector
from gpuagent.schema import catalog
from gpuagent.schema.fields import Measurement
from gpuagent.sink import Sink

log = logging.getLogger("gpuagent.plugins")

ENTRY_POINT_GROUP = "gpuagent"

# Registered exactly like third-party plugins: a module with hookimpls.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "gpuagent.plugins.host",
    "gpuagent.plugins.file",
    "gpuagent.plugins.influxdb",
    "gpuagent.plugins.prometheus",
    "gpuagent.plugins.clocks",
    "gpuagent.plugins.power",
    "gpuagent.plugins.memory",
    "gpuagent.plugins.pcie",
    "gpuagent.plugins.processes",
    "gpuagent.plugins.p2p",
    "gpuagent.plugins.nvlink",
    "gpuagent.plugins.mig",
    "gpuagent.plugins.vgpu",
    "gpuagent.plugins.health",
    "gpuagent.plugins.gpu_info",
    "gpuagent.plugins.work",
)


@dataclass
class PluginInfo:
    name: str
    module: str
    version: str | None = None
    distribution: str | None = None
    source: str = "builtin"  # builtin | entry_point | plugins_dir
    hooks: list[str] = field(default_factory=list)
    collectors: list[str] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    status: str = "loaded"  # loaded | failed | disabled
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _error_line(exc: BaseException) -> str:
    # One line, but all of it: pluggy puts the useful part of its errors on the third line.
    lines = [line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    return "; ".join(lines)


class PluginHost:
    """Owns the pluggy PluginManager and what the plugins registered."""

    def __init__(
        self,
        disabled: Iterable[str] = (),
        plugins_dir: str | Path | None = None,
        load_entry_points: bool = True,
    ):
        env_disabled = os.environ.get("GPUAGENT_DISABLE_PLUGINS", "")
        self.env_disabled = {n.strip() for n in env_disabled.split(",") if n.strip()}
        self.disabled = set(disabled) | self.env_disabled
        self.plugins_dir = Path(plugins_dir) if plugins_dir else None
        self.load_entry_points = load_entry_points
        self.pm = pluggy.PluginManager("gpuagent")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.collectors: dict[str, type[Collector]] = {}
        self.sinks: dict[str, type[Sink]] = {}
        self._modules: dict[str, ModuleType] = {}
        self._loaded = False
        self.plugins_dir_refused: str | None = None  # why [plugins] dir was not imported from

    # -- loading ---------------------------------------------------------

    def load(self) -> PluginHost:
        if self._loaded:
            return self
        self._loaded = True
        for modname in DEFAULT_PLUGINS:
            name = modname.rsplit(".", 1)[-1]
            self._load(name, modname, lambda m=modname: importlib.import_module(m), source="builtin")
        if self.load_entry_points:
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                dist = ep.dist.name if ep.dist else None
                version = ep.dist.version if ep.dist else None
                self._load(ep.name, ep.value, ep.load, source="entry_point", distribution=dist, version=version)
        if self.plugins_dir:
            self.plugins_dir_refused = plugins_dir_problem(self.plugins_dir)
            if self.plugins_dir_refused:
                log.error("plugins dir not loaded: %s", self.plugins_dir_refused)
            else:
                for path in sorted(self.plugins_dir.glob("*.py")):
                    self._load(path.stem, str(path), lambda p=path: _import_file(p), source="plugins_dir")
        unknown = sorted(self.env_disabled - set(self.plugins))
        if unknown:
            # A misspelt name would otherwise leave the plugin it meant running, silently.
            log.warning(
                "GPUAGENT_DISABLE_PLUGINS: no plugin named %s (known: %s)",
                ", ".join(map(repr, unknown)),
                ", ".join(sorted(self.plugins)),
            )
        # Each plugin passed its own check in _load; this is the safety net.
        self.pm.check_pending()
        self._register("collectors", self.pm.hook.gpuagent_register_collectors, self.collectors, Collector)
        self._register("sinks", self.pm.hook.gpuagent_register_sinks, self.sinks, Sink)
        # A plugin that failed in one hook registers nothing at all (no half-loaded plugins).
        for info in self.failed():
            for cname in info.collectors:
                self.collectors.pop(cname, None)
            for sname in info.sinks:
                self.sinks.pop(sname, None)
        # What they write, for the readers of declarations (the Prometheus sink's HELP and TYPE).
        for schema in (*(c.schema for c in self.collectors.values()), *(s.schema for s in self.sinks.values())):
            catalog.declare(schema)
        return self

    def _load(self, name, module, loader, *, source, distribution=None, version=None) -> None:
        if name in self.plugins:
            name = f"{name}({module})"
        info = PluginInfo(name=name, module=module, source=source, distribution=distribution, version=version)
        if source == "builtin":
            from gpuagent import __version__

            info.version, info.distribution = __version__, "gpuagent"
        self.plugins[name] = info
        if name in self.disabled:
            info.status = "disabled"
            return
        try:
            mod = loader()
            self.pm.register(mod, name=name)
            # A misspelt hook name (gpuagent_register_colectors) fails its plugin loudly, here:
            # every plugin registered before passed this check, so what is pending is this one's.
            self.pm.check_pending()
        except (Exception, SystemExit) as exc:  # a broken third-party package must not stop the rest
            if self.pm.get_plugin(name) is not None:
                self.pm.unregister(name=name)
            info.status, info.error = "failed", _error_line(exc)
            log.error("plugin %s (%s) failed to load: %s", name, module, info.error)
            return
        self._modules[name] = mod
        info.hooks = sorted(impl_hook for impl_hook in _hooks_of(self.pm, name))

    def _register(self, kind, hook, registry, base) -> None:
        for impl in hook.get_hookimpls():
            info = self.plugins[impl.plugin_name]
            if info.status != "loaded":
                continue

            def register(cls, _info=info):
                if not (isinstance(cls, type) and issubclass(cls, base)):
                    raise TypeError(f"register() takes a {base.__name__} subclass, got {cls!r}")
                if not cls.name:
                    raise TypeError(f"{cls.__name__} has no name")
                # Checked here, not when the config is bound: a bad Config must fail its plugin, not the host.
                if not (isinstance(cls.Config, type) and issubclass(cls.Config, base.Config)):
                    raise TypeError(f"{cls.__name__}.Config must subclass gpuagent.{base.Config.__name__}")
                if not (isinstance(cls.schema, tuple) and all(isinstance(m, Measurement) for m in cls.schema)):
                    raise TypeError(f"{cls.__name__}.schema must be a tuple of gpuagent.schema.fields.Measurement")
                owner = next((p for p in self.plugins.values() if cls.name in getattr(p, kind)), None)
                if cls.name in registry and owner is not _info:
                    raise ValueError(
                        f"{kind[:-1]} {cls.name!r} is already registered by plugin {owner.name if owner else '?'}"
                    )
                registry[cls.name] = cls
                getattr(_info, kind).append(cls.name)

            try:
                _call(impl, register=register)
            except Exception as exc:  # a hook that raises fails its plugin alone
                info.status, info.error = "failed", _error_line(exc)
                log.error("plugin %s failed in %s: %s", info.name, hook.name, info.error)
                for cname in getattr(info, kind):
                    registry.pop(cname, None)

    def register_commands(self, cli) -> None:
        """Let plugins add CLI commands; each plugin's hook is guarded."""
        for impl in self.pm.hook.gpuagent_register_commands.get_hookimpls():
            info = self.plugins[impl.plugin_name]
            if info.status != "loaded":
                continue
            before = set(cli.commands)
            try:
                _call(impl, cli=cli)
            except Exception as exc:
                info.status, info.error = "failed", _error_line(exc)
                log.error("plugin %s failed in gpuagent_register_commands: %s", info.name, info.error)
            info.commands = sorted(set(cli.commands) - before)

    # -- queries ---------------------------------------------------------

    def failed(self) -> list[PluginInfo]:
        return [p for p in self.plugins.values() if p.status == "failed"]

    def owner_of(self, kind: str, name: str) -> PluginInfo | None:
        return next((p for p in self.plugins.values() if name in getattr(p, kind)), None)

    def sample_config(self, name: str) -> str | None:
        """The sample.toml shipped beside a plugin's module, if any."""
        mod = self._modules.get(name)
        # Only a package has a folder of its own; a single-file module's neighbours are not its own.
        file = getattr(mod, "__file__", None)
        if mod is None or not file or not hasattr(mod, "__path__"):
            return None
        sample = Path(file).parent / "sample.toml"
        return sample.read_text() if sample.is_file() else None


def load_host(
    config=None,
    *,
    plugins_dir: str | Path | None = None,
    extra_disabled: Iterable[str] = (),
    entry_points: bool = True,
) -> PluginHost:
    """The one way to build the plugin host: ``config``'s ``[plugins]`` (disabled, dir) applied,
    a command line's ``plugins_dir`` and ``extra_disabled`` on top. Every command goes through
    here, so a plugin disabled for one is disabled (and never imported) for all.
    ``entry_points=False`` loads the built-ins (and ``dir``) only: the default config's text."""
    plugins = getattr(config, "plugins", None)
    disabled = (*(getattr(plugins, "disabled", None) or ()), *extra_disabled)
    folder = plugins_dir or getattr(plugins, "dir", None) or None
    return PluginHost(disabled=disabled, plugins_dir=folder, load_entry_points=entry_points).load()


_SHARED: list[PluginHost] = []


def registered(kind: str, name: str) -> Any:
    """The class a loaded plugin registered (``kind``: "collectors" or "sinks"), for code that reads
    what that plugin writes (compare reads the Prometheus sink's metric names and the InfluxDB
    sink's config): the host is built once, through load_host; not loaded is a one-line AgentError.
    Any: the caller names the plugin and uses that class's own attributes (metric_for, its Config)."""
    from gpuagent.errors import AgentError

    if not _SHARED:
        _SHARED.append(load_host())
    cls = getattr(_SHARED[0], kind).get(name)
    if cls is None:
        raise AgentError(f"the {name} plugin is not loaded (see `gpuagent plugins`)")
    return cls


def builtin_names() -> list[str]:
    """The built-in plugins' names, in load order."""
    return [modname.rsplit(".", 1)[-1] for modname in DEFAULT_PLUGINS]


def _hooks_of(pm: pluggy.PluginManager, name: str) -> list[str]:
    plugin = pm.get_plugin(name)
    callers = pm.get_hookcallers(plugin) or []
    return [c.name for c in callers]


def plugins_dir_problem(folder: Path) -> str | None:
    """Why the agent must not import from ``folder``, or None. Its code runs as the agent's user
    (root, often): the folder and each .py in it must be owned by root or that user and writable
    by no one else (a sticky bit does not help: others could still add a plugin)."""
    from gpuagent.service.ownership import OTHERS_WRITE, describe
    from gpuagent.service.safe_files import trusted_owners

    trusted = trusted_owners()
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return None  # nothing to import (as before)
    except OSError as exc:
        return f"cannot read {folder}: {exc.strerror or exc}"
    entries = [(folder, st)]
    try:
        entries += [(p, os.stat(p)) for p in sorted(folder.glob("*.py"))]
    except OSError as exc:
        return f"cannot read {folder}: {exc.strerror or exc}"
    for path, st in entries:
        if st.st_uid not in trusted:
            return f"{describe(path, st)} is owned by another user than root or the agent's"
        if st.st_mode & OTHERS_WRITE:
            return f"{describe(path, st)} is writable by other users"
    return None


def _import_file(path: Path) -> ModuleType:
    modname = f"gpuagent_local_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


def _call(impl, **available):
    """Pass an implementation only the arguments it declares, as pluggy does: a hook
    may gain arguments in a minor release without breaking existing plugins."""
    return impl.function(**{name: available[name] for name in impl.argnames if name in available})
