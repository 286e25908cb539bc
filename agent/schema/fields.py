"""A measurement's declaration: its fields (type, unit, gauge or counter, help) and its tags.

Each collector (and each sink, for its statistics in the ``gpuagent`` measurement) sets
``schema`` to the Measurements it writes. The plugin READMEs' field tables are generated from
them (``python -m gpuagent.schema.readme --write``), the Prometheus sink takes HELP and TYPE
from them, and a test checks what each collector emits on the simulated fleet against them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter"]

# The stream's value types and the names the READMEs give them.
TYPE_NAMES: dict[type, str] = {float: "float", int: "int", bool: "bool", str: "string"}


@dataclass(frozen=True)
class Field:
    name: str  # the line-protocol field key; <N> or {x} stand for a part of the name (link<N>_errors)
    type: type  # float, int, bool or str
    unit: str = ""  # as the README writes it: W, MHz, bytes, % (empty: none)
    kind: Kind = "gauge"  # counter: only grows (resets on a driver reload or restart)
    help: str = ""  # what it means, Markdown (the README's notes; plain text in Prometheus HELP)
    source: str = ""  # where the value comes from (an NVML call, "derived"), Markdown

    def __post_init__(self) -> None:
        if self.type not in TYPE_NAMES:
            raise TypeError(f"field {self.name}: type {self.type!r} is none of float, int, bool, str")

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.type]

    @property
    def plain_help(self) -> str:
        """The help without Markdown (code spans and bold), on one line: Prometheus' HELP text."""
        return plain(self.help)


def plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "").replace("**", "")).strip()


@dataclass(frozen=True)
class Measurement:
    """One shape of point under a measurement name: its fields and the tags beyond a GPU's identity.

    A measurement written in several shapes (gpu_mig per GPU and per MIG device) is declared once
    per shape, each with its own ``part`` (the README has a table for each).
    """

    name: str
    fields: tuple[Field, ...]
    tags: tuple[str, ...] = ()
    part: str = ""
    # The README table's columns: the source column's header (None: no such column), and whether
    # unit and kind are columns of their own (False: folded into the type cell, "int, counter").
    source_column: str | None = "NVML source"
    unit_column: bool = True

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def key(self) -> str:
        """How a README marker names this shape: ``gpu_mig`` or ``gpu_mig/mig_device``."""
        return f"{self.name}/{self.part}" if self.part else self.name


def gauge(name: str, type: type, unit: str = "", help: str = "", source: str = "") -> Field:
    return Field(name, type, unit, "gauge", help, source)


def counter(name: str, type: type, unit: str = "", help: str = "", source: str = "") -> Field:
    return Field(name, type, unit, "counter", help, source)
