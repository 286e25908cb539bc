"""`[compare.prices]`: what a GPU-hour and a kWh cost, for `compare`'s cost per unit of work.

    [compare.prices]
    kwh = 0.12          # $ per kWh at the meter
    pue = 1.3           # facility energy / IT energy (1.0 when omitted)
    [compare.prices.gpu_hour]
    "NVIDIA H100 80GB HBM3" = 2.50   # $ per GPU-hour, by the `model` tag (NVML's product name)
    default = 1.00                    # any other model

One small module so that every reader of the table (compare's cost per unit, the health
actions' cost of an idle allocation) prices a GPU-hour the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuagent.config import read_config, resolve_path
from gpuagent.errors import ConfigError


@dataclass(frozen=True)
class Prices:
    gpu_hour: dict[str, float] = field(default_factory=dict)  # model name (or "default") -> $ per GPU-hour
    kwh: float | None = None  # $ per kWh
    pue: float = 1.0

    @property
    def any(self) -> bool:
        return bool(self.gpu_hour) or self.kwh is not None

    def gpu_hour_price(self, model: str) -> float | None:
        """$ per GPU-hour of `model`: its own price, else the default, else None (not priced)."""
        price = self.gpu_hour.get(model)
        return self.gpu_hour.get("default") if price is None else price

    def cost(self, model: str, gpu_hours: float, energy_kwh: float) -> float | None:
        """$ of `gpu_hours` of `model` that drew `energy_kwh` at the GPU (× PUE at the meter);
        None when neither the GPU-hour nor the kWh is priced. An unpriced part costs nothing."""
        hour = self.gpu_hour_price(model)
        if hour is None and self.kwh is None:
            return None
        return (hour or 0.0) * gpu_hours + (self.kwh or 0.0) * self.pue * energy_kwh

    def as_dict(self) -> dict:
        return {"gpu_hour": dict(self.gpu_hour), "kwh": self.kwh, "pue": self.pue}


def _number(value, key: str, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{label}: compare.prices.{key}: expected a number >= 0, got {value!r}")
    return float(value)


def parse_prices(table, label: str = "config") -> Prices:
    """The `[compare.prices]` table (a dict) as Prices; a wrong key or type is one ConfigError line."""
    if table is None:
        return Prices()
    if not isinstance(table, dict):
        raise ConfigError(f"{label}: compare.prices: expected a table")
    unknown = sorted(set(table) - {"gpu_hour", "kwh", "pue"})
    if unknown:
        raise ConfigError(f"{label}: compare.prices: unknown key(s) {', '.join(unknown)} (known: gpu_hour, kwh, pue)")
    hours = table.get("gpu_hour", {})
    if isinstance(hours, int | float) and not isinstance(hours, bool):
        hours = {"default": hours}  # one price for every model
    if not isinstance(hours, dict):
        raise ConfigError(f"{label}: compare.prices.gpu_hour: expected a table of model = price, or a number")
    gpu_hour = {str(m): _number(v, f"gpu_hour.{m!r}", label) for m, v in hours.items()}
    kwh = _number(table["kwh"], "kwh", label) if "kwh" in table else None
    pue = _number(table["pue"], "pue", label) if "pue" in table else 1.0
    if pue < 1.0:
        raise ConfigError(f"{label}: compare.prices.pue: at least 1.0 (facility over IT energy), got {pue!r}")
    return Prices(gpu_hour, kwh, pue)


def prices_from(config_path: str | None) -> Prices:
    """`[compare.prices]` of the config (the one `compare` reads), or no prices without a config."""
    if resolve_path(config_path) is None:
        return Prices()
    config = read_config(config_path)
    table = config.raw.get("compare", {})
    return parse_prices(table.get("prices") if isinstance(table, dict) else None, config.label)
