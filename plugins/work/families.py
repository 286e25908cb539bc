"""The inference servers' own /metrics families that count work, and a reader for them.

Names as each server exposes them in the Prometheus text format (0.0.4); the versions they
hold for are in this plugin's README. A counter is read from its sample; a histogram
(TGI's token counts) from its ``_sum``. Samples of one (workload, unit) are added up over
their other labels (vLLM's ``finished_reason`` and data-parallel ``engine``, Triton's ``version``),
each label child reset-corrected first (ChildCounters): one engine's restart is not a restart of the sum.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    sample: str  # the sample name on the wire
    unit: str
    workload_label: str | None  # the label naming the served model; None: one model a server


# Order matters only for detection: the first source with a family in the answer is the server.
SOURCES: dict[str, tuple[Family, ...]] = {
    # vLLM (prometheus_client; vllm/engine/metrics.py, vllm/v1/metrics/loggers.py)
    "vllm": (
        Family("vllm:generation_tokens_total", "tokens_out", "model_name"),
        Family("vllm:prompt_tokens_total", "tokens_in", "model_name"),
        Family("vllm:request_success_total", "requests", "model_name"),
    ),
    # SGLang (prometheus_client; python/sglang/srt/metrics/collector.py)
    "sglang": (
        Family("sglang:generation_tokens_total", "tokens_out", "model_name"),
        Family("sglang:prompt_tokens_total", "tokens_in", "model_name"),
        Family("sglang:num_requests_total", "requests", "model_name"),
    ),
    # NVIDIA Triton (prometheus-cpp; docs/user_guide/metrics.md, "Inference Request Metrics")
    "triton": (
        Family("nv_inference_request_success", "requests", "model"),
        Family("nv_inference_count", "inferences", "model"),
        Family("nv_inference_exec_count", "executions", "model"),
    ),
    # Hugging Face TGI (the router's `metrics` crate; router/src/server.rs). One model a
    # server: its name comes from GET /info (model_id).
    "tgi": (
        Family("tgi_request_generated_tokens_sum", "tokens_out", None),
        Family("tgi_request_input_length_sum", "tokens_in", None),
        Family("tgi_request_success", "requests", None),
    ),
}

# A family named on a # TYPE line also identifies a server that has served nothing yet
# (prometheus_client writes HELP and TYPE before any labelled sample exists).
_TYPE_NAMES = {source: {re.sub(r"_sum$", "", f.sample) for f in families} for source, families in SOURCES.items()}
_WANTED = {f.sample: (source, f) for source, families in SOURCES.items() for f in families}
# Possessive (*+, ++): the match never backtracks, so its cost is linear in the line.
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*+)\s*+=\s*+"((?:[^"\\]++|\\.)*+)"')
MAX_LINE = 16 << 10  # a server's sample line is well under 1 KiB; a longer one is cut, counted
MAX_KEYS = 4096  # (workload, unit) pairs kept from one answer; the rest cut, counted
MAX_CHILDREN = 16384  # label children (series) kept from one answer; the rest cut, counted as lines


def detect(text: str) -> str | None:
    """The source whose families this /metrics answer holds; None: not a server we know."""
    found: set[str] = set()
    for line in text.splitlines():
        if len(line) > MAX_LINE:
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            name = parts[2] if len(parts) > 2 else ""
            found.update(s for s, names in _TYPE_NAMES.items() if name in names)
        elif line and not line.startswith("#"):
            name = _sample_name(line)
            if name in _WANTED:
                found.add(_WANTED[name][0])
    return next((s for s in SOURCES if s in found), None)


def read(text: str, source: str, default_workload: str, cut: Counter | None = None) -> dict[tuple[str, str], float]:
    """(workload, unit) -> the counter's value, over the source's families in ``text``."""
    return {key: sum(ch.values()) for key, ch in read_children(text, source, default_workload, cut).items()}


Children = dict[tuple[str, str], dict[tuple, float]]  # (workload, unit) -> label child -> value


def read_children(text: str, source: str, default_workload: str, cut: Counter | None = None) -> Children:
    """(workload, unit) -> {label child (sample name, its labels): value}, over the source's families.
    Lines over MAX_LINE, pairs past MAX_KEYS and children past MAX_CHILDREN are left out, counted in
    ``cut`` ("lines", "workloads")."""
    out: Children = {}
    cut = Counter() if cut is None else cut
    kept = 0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            cut["lines"] += 1
            continue
        name = _sample_name(line)
        hit = _WANTED.get(name)
        if hit is None or hit[0] != source:
            continue
        family = hit[1]
        labels, value = _labels_and_value(line, len(name))
        if value is None:
            continue
        workload = labels.get(family.workload_label, "") if family.workload_label else ""
        key = (workload or default_workload, family.unit)
        if key not in out and len(out) >= MAX_KEYS:
            cut["workloads"] += 1
            continue
        child = (name, tuple(sorted(labels.items())))
        children = out.setdefault(key, {})
        if child not in children:
            if kept >= MAX_CHILDREN:  # each child is state kept across cycles (ChildCounters)
                cut["lines"] += 1
                continue
            kept += 1
        children[child] = children.get(child, 0.0) + value
    return out


class ChildCounters:
    """A server's counters summed over their label children, each child reset-corrected: a child that
    drops while another child of the sum holds or grows (one data-parallel engine, one Triton model
    version restarted) adds its last value to an offset kept for it, so the sum never drops and every
    query engine reads the same increase. When every child that had counted drops (or vanishes) at
    once, the server restarted: the raw sum is published (the reset shows; both engines count a
    restart as the new value) and the offsets start again."""

    FORGET_S = 3600.0  # the state of a piece of work not seen for this long is dropped

    def __init__(self) -> None:
        self._state: dict[tuple, tuple[float, dict[tuple, list[float]]]] = {}  # -> (seen at, child -> [last, offset])

    def total(self, work_id: str, children: Children, now: float) -> dict[tuple[str, str], float]:
        out = {}
        for key, values in children.items():
            seen = self._state.get((work_id, *key))
            known = seen[1] if seen else {}
            counted = [c for c, (last, _) in known.items() if last > 0]
            restarted = bool(counted) and all(c not in values or values[c] < known[c][0] for c in counted)
            if restarted or not known:
                state = {c: [v, 0.0] for c, v in values.items()}
            else:
                state = {c: list(v) for c, v in known.items()}  # a vanished child keeps what it counted
                for c, v in values.items():
                    last, offset = state.get(c, [0.0, 0.0])
                    state[c] = [v, offset + last if v < last else offset]
            self._state[(work_id, *key)] = (now, state)
            out[key] = sum(v + offset for v, offset in state.values())
        for k in [k for k, (at, _) in self._state.items() if now - at > self.FORGET_S]:
            del self._state[k]
        return out


def _sample_name(line: str) -> str:
    end = len(line)
    for stop in ("{", " ", "\t"):
        i = line.find(stop)
        if i != -1:
            end = min(end, i)
    return line[:end]


def _labels_and_value(line: str, start: int) -> tuple[dict[str, str], float | None]:
    labels: dict[str, str] = {}
    rest = line[start:]
    if rest.startswith("{"):
        close = _closing_brace(rest)
        if close == -1:
            return labels, None
        for key, raw in _LABEL.findall(rest[1:close]):
            labels[key] = raw.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        rest = rest[close + 1 :]
    parts = rest.split()
    if not parts:
        return labels, None
    try:
        value = float(parts[0])
    except ValueError:
        return labels, None
    return labels, value if math.isfinite(value) and value >= 0 else None


def _closing_brace(text: str) -> int:
    """Index of the ``}`` that ends the label set (braces inside quoted values skipped)."""
    quoted = escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
    return -1
