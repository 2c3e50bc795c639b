"""screener.probe.facts: the facts script (run for real, also on a fake sysfs) and its parsers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from screener.errors import ConfigError, ProbeError
from screener.probe.facts import (
    FACTS_SCRIPT,
    MARK,
    PcieLink,
    facts_argv,
    parse_facts,
    parse_mdstat,
    parse_pcie,
    parse_scheduler,
    parse_smart_log,
)
from screener.probe_data import MdStatus, NodeFacts, SmartLog

DATA = Path(__file__).parent / "data" / "probe" / "facts"


def text(name: str) -> str:
    return (DATA / name).read_text()


# ------------------------------------------------------------------------- argv


def test_argv_passes_the_target_as_positional_parameter_only() -> None:
    argv = facts_argv("/scratch/$(reboot)")
    assert argv == ["sh", "-c", FACTS_SCRIPT, "screener-facts", "/scratch/$(reboot)"]
    assert "scratch" not in FACTS_SCRIPT


@pytest.mark.parametrize("target", ["scratch", "", "/a\nb"])
def test_bad_target_is_a_config_error(target: str) -> None:
    with pytest.raises(ConfigError, match="absolute path"):
        facts_argv(target)


# ------------------------------------------------------------------------- small parsers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("mq-deadline kyber [none]\n", "none"),
        ("[mq-deadline] kyber bfq none", "mq-deadline"),
        ("none", "none"),
        ("[bfq]", "bfq"),
        ("", None),
        ("mq-deadline none", None),
    ],
)
def test_parse_scheduler(raw: str, expected: str | None) -> None:
    assert parse_scheduler(raw) == expected


def test_parse_pcie_kernel_formats() -> None:
    link = parse_pcie(
        {
            "current_link_speed": "8.0 GT/s PCIe\n",
            "max_link_speed": "16.0 GT/s PCIe",
            "current_link_width": "4",
            "max_link_width": "4\n",
        }
    )
    assert link == PcieLink("8.0 GT/s PCIe", "16.0 GT/s PCIe", 4, 4)
    old = parse_pcie({"current_link_speed": "8 GT/s", "max_link_speed": "8 GT/s"})
    assert old == PcieLink("8 GT/s", "8 GT/s", None, None)
    down = parse_pcie(
        {"current_link_speed": "Unknown", "current_link_width": "0", "max_link_width": "x8"}
    )
    assert down == PcieLink(None, None, None, 8)


def test_parse_smart_log_nvme_cli_1x_kelvin() -> None:
    assert parse_smart_log(text("smart-log_nvme-cli-1.x.json")) == SmartLog(
        critical_warning=0, temperature_c=37.85, media_errors=0, percentage_used=3
    )


def test_parse_smart_log_nvme_cli_2x() -> None:
    assert parse_smart_log(text("smart-log_nvme-cli-2.x_hot_media_errors.json")) == SmartLog(
        critical_warning=2, temperature_c=81.85, media_errors=14, percentage_used=17
    )


def test_parse_smart_log_nvme_cli_2x_verbose_and_string_counters() -> None:
    assert parse_smart_log(text("smart-log_nvme-cli-2.x_verbose.json")) == SmartLog(
        critical_warning=4, temperature_c=44.85, media_errors=1027, percentage_used=104
    )


@pytest.mark.parametrize(
    ("temperature", "celsius"),
    [(42, 42.0), ("42 C", 42.0), ("42 °C", 42.0), ("315 K", 41.85), ("315 Kelvin", 41.85)],
)
def test_smart_temperature_units(temperature: object, celsius: float) -> None:
    doc = {"critical_warning": 0, "media_errors": 0, "percentage_used": 1}
    log = parse_smart_log(json.dumps({**doc, "temperature": temperature}))
    assert log.temperature_c == celsius
    assert log.percentage_used == 1


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("NVMe status: INVALID_LOG_PAGE: The log page is invalid(0x109)", "not JSON"),
        ("[1, 2]", "not an object"),
        ('{"critical_warning": 0, "temperature": 300, "percent_used": 0}', "media_errors"),
        (
            '{"critical_warning": 0, "temperature": "hot", "percent_used": 0, "media_errors": 0}',
            "temp",
        ),
        (
            '{"critical_warning": "x", "temperature": 300, "percent_used": 0, "media_errors": 0}',
            "crit",
        ),
    ],
)
def test_bad_smart_log_is_a_probe_error(output: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        parse_smart_log(output, "node01")


def test_parse_mdstat_clean_mirror() -> None:
    assert parse_mdstat(text("mdstat_raid1_clean.txt")) == MdStatus(arrays=("md0",))


def test_parse_mdstat_degraded_rebuilding_and_scrubbing() -> None:
    md = parse_mdstat(text("mdstat_degraded_recovering.txt"))
    assert md.arrays == ("md1", "md0", "md2", "md3", "md4")
    assert md.degraded == ("md1", "md4")
    assert md.rebuilding == ("md1", "md3")  # md2 is only in "check"


def test_parse_mdstat_without_arrays() -> None:
    empty = "Personalities : \nunused devices: <none>\n"
    assert parse_mdstat(empty) == MdStatus()


# ------------------------------------------------------------------------- parse_facts, real data


def test_parse_facts_loop_device() -> None:
    facts = parse_facts(text("loop.txt"), "node02")
    assert facts == NodeFacts(
        device="loop0",
        scheduler="none",
        read_ahead_kb=2560,
        nr_requests=128,
        write_cache="write back",
    )
    assert not facts.pcie_downgraded


def test_parse_facts_partition_resolves_to_its_disk() -> None:
    raw = text("loop_partition.txt")
    assert "/dev/loop1p1" in raw
    assert parse_facts(raw, "n").device == "loop1"


def test_parse_facts_virtio_root() -> None:
    facts = parse_facts(text("virtio_root.txt"), "n")
    assert (facts.device, facts.scheduler, facts.read_ahead_kb) == ("vda", "mq-deadline", 8192)
    assert facts.pcie_speed is None and facts.smart is None


def test_parse_facts_missing_target_gives_empty_facts() -> None:
    assert parse_facts(text("missing_target.txt"), "n") == NodeFacts()


def test_parse_facts_nvme_with_everything() -> None:
    out = "\n".join(
        [
            f"{MARK} target",
            "/scratch",
            f"{MARK} disk nvme0n1",
            f"{MARK} queue nvme0n1 scheduler",
            "[none] mq-deadline kyber bfq",
            f"{MARK} queue nvme0n1 nr_requests",
            "1023",
            f"{MARK} pcie nvme0n1 current_link_speed",
            "8.0 GT/s PCIe",
            f"{MARK} pcie nvme0n1 max_link_speed",
            "16.0 GT/s PCIe",
            f"{MARK} pcie nvme0n1 current_link_width",
            "4",
            f"{MARK} pcie nvme0n1 max_link_width",
            "4",
            f"{MARK} smart-log nvme0n1",
            text("smart-log_nvme-cli-2.x_hot_media_errors.json"),
            f"{MARK} mdstat",
            text("mdstat_raid1_clean.txt"),
            f"{MARK} end",
        ]
    )
    facts = parse_facts(out, "n")
    assert facts.device == "nvme0n1"
    assert facts.pcie_downgraded
    assert facts.smart is not None and facts.smart.media_errors == 14
    assert facts.md == MdStatus(arrays=("md0",))
    assert (facts.nr_requests, facts.read_ahead_kb, facts.write_cache) == (1023, None, None)


def test_unreadable_smart_section_means_no_smart_not_an_error() -> None:
    out = f"{MARK} disk nvme0n1\n{MARK} smart-log nvme0n1\nfailed to open /dev/nvme0n1: EACCES\n"
    assert parse_facts(out, "n") == NodeFacts(device="nvme0n1")


@pytest.mark.parametrize("output", ["", "sh: 1: findmnt: not found\n", "{}"])
def test_output_without_sections_is_a_probe_error(output: str) -> None:
    with pytest.raises(ProbeError, match=r"^node03: facts output has no sections"):
        parse_facts(output, "node03")


# ------------------------------------------------------------------------- the script, for real


def run_script(target: Path, root: Path | None = None) -> str:
    argv = facts_argv(str(target)) + ([str(root)] if root else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.rstrip().endswith(f"{MARK} end")
    return done.stdout


def test_script_on_this_machine_matches_sysfs(tmp_path: Path) -> None:
    facts = parse_facts(run_script(tmp_path), "local")
    if facts.device is None:
        pytest.skip("tmp_path is not on a block device here")
    queue = Path("/sys/block") / facts.device / "queue"
    assert facts.scheduler == parse_scheduler((queue / "scheduler").read_text())
    assert facts.nr_requests == int((queue / "nr_requests").read_text())
    assert facts.read_ahead_kb == int((queue / "read_ahead_kb").read_text())


def test_script_on_missing_target_still_ends_cleanly(tmp_path: Path) -> None:
    assert parse_facts(run_script(tmp_path / "nope"), "local") == NodeFacts()


def _maj_min(path: Path) -> str:
    done = subprocess.run(
        ["findmnt", "-n", "-o", "MAJ:MIN", "-T", str(path)], capture_output=True, text=True
    )
    return done.stdout.strip()


def _fake_nvme(root: Path, ctrl: int, width: int, multipath: bool = False) -> Path:
    """A fake sysfs NVMe namespace with one partition; returns the partition's directory."""
    pci = root / f"sys/devices/pci0000:00/0000:00:0{ctrl}.0/0000:0{ctrl}:00.0"
    pci.mkdir(parents=True)
    for name, value in (
        ("current_link_speed", "16.0 GT/s PCIe"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", str(width)),
        ("max_link_width", "4"),
    ):
        (pci / name).write_text(value + "\n")
    controller = pci / f"nvme/nvme{ctrl}"
    ns = controller / f"nvme{ctrl}n1"
    if multipath:  # native multipath: the namespace hangs off a virtual subsystem
        subsys = root / f"sys/devices/virtual/nvme-subsystem/nvme-subsys{ctrl}"
        ns = subsys / f"nvme{ctrl}n1"
        ns.mkdir(parents=True)
        controller.mkdir(parents=True)
        (subsys / f"nvme{ctrl}").symlink_to(controller)
        (ns / "device").symlink_to(subsys)
    else:
        ns.mkdir(parents=True)
        (ns / "device").symlink_to(controller)
    (ns / "queue").mkdir()
    (ns / "queue/scheduler").write_text("[none] mq-deadline\n")
    (ns / "queue/nr_requests").write_text("1023\n")
    part = ns / f"nvme{ctrl}n1p1"
    part.mkdir()
    (part / "partition").write_text("1\n")
    for d in ("sys/class/block", "sys/block"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / f"sys/class/block/nvme{ctrl}n1").symlink_to(ns)
    (root / f"sys/class/block/nvme{ctrl}n1p1").symlink_to(part)
    (root / f"sys/block/nvme{ctrl}n1").symlink_to(ns)
    return part


def _map_target(root: Path, target: Path, device_dir: Path) -> None:
    maj_min = _maj_min(target)
    if not maj_min:
        pytest.skip("findmnt gives no MAJ:MIN for tmp_path")
    (root / "sys/dev/block").mkdir(parents=True, exist_ok=True)
    (root / f"sys/dev/block/{maj_min}").symlink_to(device_dir)


def test_script_on_fake_sysfs_partition_on_nvme(tmp_path: Path) -> None:
    root, target = tmp_path / "root", tmp_path / "scratch"
    target.mkdir()
    part = _fake_nvme(root, 1, width=2)
    _map_target(root, target, part)
    (root / "proc").mkdir()
    (root / "proc/mdstat").write_text(text("mdstat_degraded_recovering.txt"))
    out = run_script(target, root)
    facts = parse_facts(out, "fake")
    assert facts.device == "nvme1n1"
    assert (facts.pcie_width, facts.pcie_max_width) == (2, 4) and facts.pcie_downgraded
    assert facts.pcie_speed == facts.pcie_max_speed == "16.0 GT/s PCIe"
    assert (facts.scheduler, facts.nr_requests) == ("none", 1023)
    assert facts.md is not None and facts.md.degraded == ("md1", "md4")


def test_script_on_fake_sysfs_md_over_two_nvme_picks_the_sick_one(tmp_path: Path) -> None:
    root, target = tmp_path / "root", tmp_path / "scratch"
    target.mkdir()
    healthy = _fake_nvme(root, 2, width=4)
    degraded_link = _fake_nvme(root, 3, width=1, multipath=True)
    md = root / "sys/devices/virtual/block/md0"
    (md / "slaves").mkdir(parents=True)
    (md / "slaves/nvme2n1p1").symlink_to(healthy)
    (md / "slaves/nvme3n1p1").symlink_to(degraded_link)
    (root / "sys/class/block/md0").symlink_to(md)
    _map_target(root, target, md)
    out = run_script(target, root)
    assert f"{MARK} disk nvme2n1" in out and f"{MARK} disk nvme3n1" in out
    facts = parse_facts(out, "fake")
    assert facts.device == "nvme3n1"
    assert (facts.pcie_width, facts.pcie_max_width) == (1, 4)


@pytest.mark.parametrize("key", ["media_errors", "temperature", "critical_warning"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_smart_log_nan_or_infinity_is_a_probe_error(key: str, value: str) -> None:
    """json accepts NaN/Infinity; int() of them raised ValueError/OverflowError out of the
    parser (found by test_fuzz_parsers)."""
    doc = {"critical_warning": 0, "temperature": 310, "media_errors": 0, "percent_used": 1}
    text = json.dumps(doc).replace(f'"{key}": {doc[key]}', f'"{key}": {value}')
    with pytest.raises(ProbeError, match="not finite"):
        parse_smart_log(text, "n")
