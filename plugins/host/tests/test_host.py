import re
from pathlib import Path

import psutil

import gpuagent
from gpuagent.context import AgentContext
from gpuagent.plugins.host import HostCollector

README = Path(__file__).resolve().parents[1] / "README.md"


def collect(**config):
    ctx = AgentContext(hostname="h")
    collector = HostCollector(HostCollector.Config(**config), ctx)
    acc = gpuagent.Accumulator(ctx.default_tags)
    collector.collect(acc)
    return collector, acc


def test_host_point_fields_and_types():
    _, acc = collect()
    (point,) = acc.points
    assert point.measurement == "host" and point.tags == {"host": "h"}
    f = point.fields
    assert f["mem_total_bytes"] == psutil.virtual_memory().total
    assert 0 < f["mem_available_bytes"] <= f["mem_total_bytes"]
    assert f["cpu_count"] == psutil.cpu_count()
    assert isinstance(f["load1"], float) and f["uptime_s"] > 0
    # Right after start the CPU percentage would be meaningless: left out, not 0.
    assert "cpu_usage_pct" not in f


def test_cpu_usage_present_on_later_runs():
    collector, _ = collect()
    acc = gpuagent.Accumulator()
    import time

    time.sleep(0.25)
    collector.collect(acc)
    assert 0.0 <= acc.points[0].fields["cpu_usage_pct"] <= 100.0


def test_per_cpu_points():
    collector, _ = collect(per_cpu=True)
    import time

    time.sleep(0.25)
    acc = gpuagent.Accumulator()
    collector.collect(acc)
    per_cpu = [p for p in acc.points if p.measurement == "host_cpu"]
    assert len(per_cpu) == psutil.cpu_count()
    assert sorted(p.tags["cpu"] for p in per_cpu) == sorted(str(i) for i in range(psutil.cpu_count()))


def test_readme_documents_every_field():
    collector, _ = collect()
    import time

    time.sleep(0.25)
    acc = gpuagent.Accumulator()
    collector.collect(acc)
    documented = set(re.findall(r"^\| ([a-z0-9_, `]+) \|", README.read_text(), re.M))
    names = {n.strip().strip("`") for row in documented for n in row.split(",")}
    for field in acc.points[0].fields:
        assert field in names, f"{field} missing from {README}"
