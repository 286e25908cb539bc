"""gpuagent-infiniband against the fake sysfs tree in testdata/ (run once it is pip-installed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from gpuagent_infiniband import InfinibandCollector, InfinibandConfig

import gpuagent
from gpuagent.config import bind, read_config
from gpuagent.context import AgentContext
from gpuagent.errors import ConfigError

SYSFS = Path(__file__).resolve().parent.parent / "testdata" / "sys"


def collect(**options) -> dict[tuple[str, str], gpuagent.Point]:
    config = InfinibandConfig(sysfs_root=str(options.pop("sysfs_root", SYSFS)), **options)
    collector = InfinibandCollector(config, AgentContext(hostname="node1"))
    acc = gpuagent.Accumulator({"host": "node1"}, time_ns=1)
    collector.collect(acc)
    return {(p.tags["device"], p.tags["port"]): p for p in acc.points}


def gpuagent_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from gpuagent.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_infiniband_port_tags_state_and_rate():
    points = collect()
    assert sorted(points) == [("mlx5_0", "1"), ("mlx5_1", "1"), ("mlx5_2", "1")]
    ib = points["mlx5_0", "1"]
    assert ib.measurement == "infiniband"
    assert ib.tags == {"host": "node1", "device": "mlx5_0", "port": "1", "link_layer": "InfiniBand"}
    assert ib.fields["state"] == "ACTIVE" and ib.fields["state_code"] == 4 and ib.fields["active"] is True
    assert ib.fields["phys_state"] == "LinkUp"
    assert ib.fields["rate_gbps"] == 200.0
    down = points["mlx5_2", "1"]
    assert (down.fields["state"], down.fields["active"], down.fields["phys_state"]) == ("DOWN", False, "Disabled")
    assert down.fields["rate_gbps"] == 10.0


def test_data_counters_are_4_byte_words_converted_to_bytes():
    ib = collect()["mlx5_0", "1"].fields
    assert ib["xmit_bytes_total"] == 1250000000 * 4
    assert ib["rcv_bytes_total"] == 2500000000 * 4
    assert ib["xmit_packets_total"] == 9876543  # packets are not scaled
    assert ib["symbol_errors_total"] == 7 and ib["link_downed_total"] == 2
    assert ib["xmit_wait_ticks_total"] == 4242 and ib["vl15_dropped_total"] == 0
    assert all(isinstance(v, int) for k, v in ib.items() if k.endswith("_total"))


def test_roce_port_and_hw_counters():
    roce = collect()["mlx5_1", "1"]
    assert roce.tags["link_layer"] == "Ethernet"
    assert roce.fields["np_cnp_sent_total"] == 31
    assert roce.fields["np_ecn_marked_roce_packets_total"] == 57
    assert roce.fields["roce_adp_retrans_total"] == 3
    assert "lifespan_total" not in roce.fields  # a refresh period, not a counter
    assert not any(k.startswith("np_") for k in collect(hw_counters=False)["mlx5_1", "1"].fields)


def test_devices_option_selects_devices():
    assert sorted(collect(devices=["mlx5_1"])) == [("mlx5_1", "1")]


def test_unreadable_garbage_and_huge_counters_are_left_out(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(SYSFS, root)
    counters = root / "class/infiniband/mlx5_0/ports/1/counters"
    (counters / "port_rcv_packets").write_text("N/A\n")
    (counters / "port_xmit_data").write_text(f"{2**62}\n")  # x4 is past int64
    (counters / "port_rcv_errors").unlink()
    (counters / "port_vendor_thing").write_text("12\n")  # unknown counters are kept by file name
    (root / "class/infiniband/mlx5_0/ports/1/rate").write_text("garbage\n")
    fields = collect(sysfs_root=root)["mlx5_0", "1"].fields
    for gone in ("rcv_packets_total", "xmit_bytes_total", "rcv_errors_total", "rate_gbps"):
        assert gone not in fields
    assert fields["vendor_thing_total"] == 12
    assert fields["rcv_bytes_total"] == 2500000000 * 4


def test_machine_without_hca_emits_nothing(tmp_path):
    assert collect(sysfs_root=tmp_path) == {}


def test_config_is_validated_with_one_line_errors(tmp_path):
    cfg = tmp_path / "gpuagent.toml"
    for table, expected in [
        ('sysfs_root = "/sys/nope"', 'gpuagent.toml: collectors.infiniband.sysfs_root: "/sys/nope" is not a directory'),
        ("hw_counters = 3", "gpuagent.toml: collectors.infiniband.hw_counters: expected true or false, got 3"),
        ("colour = 1", "gpuagent.toml: collectors.infiniband.colour: unknown key"),
    ]:
        cfg.write_text(f"[collectors.infiniband]\n{table}\n")
        with pytest.raises(ConfigError) as err:
            bind(read_config(cfg), {"infiniband": InfinibandCollector}, {})
        assert str(err.value) == f"{cfg}: {expected.removeprefix('gpuagent.toml: ')}"


def test_sample_config_is_valid_toml_for_the_model():
    import tomllib

    sample = (Path(gpuagent_infiniband_module().__file__).parent / "sample.toml").read_text()
    table = tomllib.loads(sample)["collectors"]["infiniband"]
    assert InfinibandConfig.model_validate(table).sysfs_root == "/sys"


def gpuagent_infiniband_module():
    import gpuagent_infiniband

    return gpuagent_infiniband


# -- the installed plugin, through the gpuagent command line ---------------------


@pytest.mark.slow
def test_installed_plugin_is_listed_with_its_version():
    out = gpuagent_cli("plugins", "--json")
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)["plugins"]}
    ib = plugins["infiniband"]
    assert ib["status"] == "loaded", ib["error"]
    assert ib["version"] == version("gpuagent-infiniband") == gpuagent_infiniband_module().__version__
    assert ib["distribution"] == "gpuagent-infiniband"
    assert ib["collectors"] == ["infiniband"]
    assert ib["hooks"] == ["gpuagent_register_collectors"]
    sample = gpuagent_cli("plugins", "--sample-config", "infiniband")
    assert sample.returncode == 0 and "[collectors.infiniband]" in sample.stdout


def gpu_collectors_off() -> str:
    """Tables that switch off the collectors that need NVML: this test runs on machines without GPUs."""
    from gpuagent.plugin_host import PluginHost

    host = PluginHost().load()
    return "".join(f"\n[collectors.{n}]\nenabled = false\n" for n, c in host.collectors.items() if c.requires_gpus)


@pytest.mark.slow
def test_run_once_test_prints_its_points(tmp_path):
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text(
        f'[agent]\nhostname = "node1"\n\n[collectors.infiniband]\nsysfs_root = "{SYSFS}"\n' + gpu_collectors_off()
    )
    check = gpuagent_cli("config", "check", str(cfg))
    assert check.returncode == 0, check.stderr
    assert "infiniband" in check.stdout
    out = gpuagent_cli("run", "--once", "--test", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("infiniband,")]
    assert len(lines) == 3
    assert any(
        "device=mlx5_0" in line and "link_layer=InfiniBand" in line and f"xmit_bytes_total={1250000000 * 4}i" in line
        for line in lines
    )
    assert "gpuagent,collector=infiniband" in out.stdout


@pytest.mark.slow
def test_readme_documents_every_tag_and_field():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    emitted = set()
    # hw_counters/ files are documented by their naming rule (the driver decides which exist).
    for point in collect(hw_counters=False).values():
        emitted |= set(point.tags) | set(point.fields)
    assert {name for name in emitted if not re.search(rf"`{name}`|\| {name} \|", readme)} == set()
    assert "every file in `hw_counters/` except `lifespan`" in " ".join(readme.split())


def test_every_field_it_writes_is_declared_with_its_type():
    # The collector's schema is what the Prometheus sink reads HELP from and the README's field
    # tables are generated from (python -m gpuagent.schema.readme --plugin gpuagent_infiniband README.md).
    declared = {f.name: f for m in InfinibandCollector.schema for f in m.fields}
    tags = {t for m in InfinibandCollector.schema for t in m.tags}
    points = collect(hw_counters=False).values()
    assert points
    for point in points:
        assert {
            n: type(v).__name__
            for n, v in point.fields.items()
            if type(v) is not getattr(declared.get(n), "type", None)
        } == {}
        assert set(point.tags) - {"host"} <= tags
