"""`compare --by job` / `--by pod` as a table, CSV, JSON or a plain HTML page (the document of
gpuagent.compare.jobs)."""

from __future__ import annotations

import csv
import html
import io
import json
from typing import Any

from gpuagent.compare import tables
from gpuagent.compare.figures import GPU_HOURS
from gpuagent.compare.work_render import hours_text

JOB_NOTE = (
    "GPU-hours: the time each GPU held the job, summed over its GPUs; energy Wh: those GPUs' energy "
    "over that time; idle GPU-h: the time it held them with no kernel activity for idle_after or longer "
    "(allocated_idle); SM mean %: its processes' SM utilisation, else the GPUs'; peak mem: its processes' "
    "most GPU memory at once."
)
COLUMNS = (
    ("job", lambda g: g["label"]),
    ("model", lambda g: ", ".join(g["models"])),
    ("GPUs", lambda g: str(g["gpus"])),
    ("GPU-hours", lambda g: f"{g['gpu_hours']:.2f}"),
    ("energy Wh", lambda g: f"{g['energy_wh']:.1f}"),
    ("idle GPU-h", lambda g: f"{g['idle_gpu_hours']:.2f}"),
    (
        "SM mean %",
        lambda g: "-" if g["sm_util_mean_pct"] is None else f"{g['sm_util_mean_pct']:.1f}",
    ),
    (
        "peak mem GiB",
        lambda g: "-" if g["peak_memory_bytes"] is None else f"{g['peak_memory_bytes'] / 2**30:.1f}",
    ),
)


def render(doc: dict[str, Any], fmt: str) -> str:
    title = "pod" if doc["by"] == "pod" else "job"
    header = [title, *(name for name, _ in COLUMNS[1:])]
    rows = [[fn(g) for _, fn in COLUMNS] for g in doc["groups"]]
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return out.getvalue()
    if fmt == "html":
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return (
            f"<!doctype html><meta charset=utf-8><title>GPU use by {title}</title>"
            f"<h1>GPU use by {title}, {doc['range']['start']} to {doc['range']['end']}</h1>"
            f"<table><tr>{cells}</tr>{body}</table>\n"
        )
    # The terminal table as the other reports': sized to the terminal, short ranges in GPU-minutes.
    terminal = [
        [*r[:3], hours_text(g[GPU_HOURS]), *r[4:5], hours_text(g["idle_gpu_hours"]), *r[6:]]
        for r, g in zip(rows, doc["groups"], strict=True)
    ]
    columns = [tables.Column(h, right=i >= 2) for i, h in enumerate(header)]
    r = doc["range"]
    return tables.render(
        f"GPU use by {title}, {r['start']} .. {r['end']} ({doc['source']['url']}, {doc['source']['database']})",
        columns,
        terminal,
        keys=1,
        footnote=JOB_NOTE,
    )
