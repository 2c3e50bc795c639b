"""Node facts that explain a slow device: block queue settings, PCIe link, NVMe SMART, md RAID.

One remote command collects everything: :data:`FACTS_SCRIPT`, a constant POSIX sh script
that receives the probe target only as ``"$1"``. It prints sections, each opened by a
header line ``::screener:: <kind> [<disk>] [<item>]`` and followed by the raw text of that
item. A missing item (loop devices have no PCIe and no SMART) just has no section.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from screener.errors import ConfigError, ProbeError
from screener.probe_data import MdStatus, NodeFacts, SmartLog

MARK = "::screener::"

# The script never interpolates the target: it is "$1" throughout. "$2", absent in
# production, prefixes /sys and /proc so tests can run it against a fake sysfs tree.
# disks() runs in a subshell (body in parentheses) so its variables stay local while it
# recurses: a partition resolves to its parent disk, a dm/md device to its slaves.
FACTS_SCRIPT = r"""
t="$1"
r="${2:-}"
m='::screener::'
echo "$m target"
printf '%s\n' "$t"
echo "$m source"
findmnt -n -o SOURCE,FSTYPE,MAJ:MIN -T "$t" 2>&1 | head -n 1

disks() (
    b="$r/sys/class/block/$1"
    [ -e "$b" ] || exit 0
    if [ -e "$b/partition" ]; then
        disks "$(basename "$(dirname "$(readlink -f "$b")")")"
        exit 0
    fi
    found=
    for s in "$b"/slaves/*; do
        [ -e "$s" ] || continue
        found=1
        disks "$(basename "$s")"
    done
    [ -n "$found" ] || echo "$1"
)

dev=
mm=$(findmnt -n -o MAJ:MIN -T "$t" 2>/dev/null | head -n 1 | tr -d ' ')
if [ -n "$mm" ] && [ -e "$r/sys/dev/block/$mm" ]; then
    dev=$(basename "$(readlink -f "$r/sys/dev/block/$mm")")
fi
if [ -z "$dev" ]; then
    src=$(findmnt -n -o SOURCE -T "$t" 2>/dev/null | head -n 1)
    [ -n "$src" ] || src=$(df -P "$t" 2>/dev/null | awk 'NR == 2 { print $1 }')
    src=${src%%\[*}
    case "$src" in
        /dev/*) dev=$(basename "$(readlink -f "$src")") ;;
    esac
fi

list=
[ -z "$dev" ] || list=$(disks "$dev" | sort -u)
for d in $list; do
    q="$r/sys/block/$d"
    echo "$m disk $d"
    for a in scheduler read_ahead_kb nr_requests write_cache; do
        if [ -r "$q/queue/$a" ]; then
            echo "$m queue $d $a"
            cat "$q/queue/$a" 2>&1
        fi
    done
    # PCIe link: the nearest ancestor of the device (or, for NVMe native multipath, of its
    # first controller) that has link attributes, i.e. the PCI function itself.
    p=$(readlink -f "$q/device" 2>/dev/null)
    case "$p" in
        */nvme-subsys*)
            for c in "$p"/nvme[0-9]*; do
                [ -e "$c" ] && { p=$(readlink -f "$c"); break; }
            done ;;
    esac
    while [ -n "$p" ] && [ "$p" != / ] && [ "$p" != "$r/sys/devices" ]; do
        if [ -r "$p/current_link_speed" ]; then
            for a in current_link_speed max_link_speed current_link_width max_link_width; do
                echo "$m pcie $d $a"
                cat "$p/$a" 2>&1
            done
            break
        fi
        p=$(dirname "$p")
    done
    case "$d" in
        nvme*)
            if [ -e "/dev/$d" ] && command -v nvme >/dev/null 2>&1; then
                echo "$m smart-log $d"
                if command -v timeout >/dev/null 2>&1; then
                    timeout 10 nvme smart-log -o json "/dev/$d" 2>&1
                else
                    nvme smart-log -o json "/dev/$d" 2>&1
                fi
            fi ;;
    esac
done
if [ -r "$r/proc/mdstat" ]; then
    echo "$m mdstat"
    cat "$r/proc/mdstat"
fi
echo "$m end"
exit 0
"""


def facts_argv(target: str) -> list[str]:
    """The remote command printing the facts sections for the device under ``target``."""
    if not target.startswith("/") or any(c in target for c in "\0\n"):
        raise ConfigError(f"facts target must be an absolute path, got {target!r}")
    # "screener-facts" becomes $0 (named in sh's own error messages); target is "$1".
    return ["sh", "-c", FACTS_SCRIPT, "screener-facts", target]


@dataclass(frozen=True)
class PcieLink:
    """A PCIe link as sysfs reports it; None where the kernel says Unknown or nothing."""

    speed: str | None = None
    max_speed: str | None = None
    width: int | None = None
    max_width: int | None = None

    @property
    def downgraded(self) -> bool:
        """Trained below its maximum speed or width (the rule of NodeFacts.pcie_downgraded)."""
        return NodeFacts(
            pcie_speed=self.speed,
            pcie_max_speed=self.max_speed,
            pcie_width=self.width,
            pcie_max_width=self.max_width,
        ).pcie_downgraded


@dataclass(frozen=True)
class DiskFacts:
    """Facts of one whole disk under the target (several for md/dm over many disks)."""

    name: str
    queue: Mapping[str, str]
    pcie: PcieLink | None
    smart: SmartLog | None


def parse_facts(text: str, node: str) -> NodeFacts:
    """NodeFacts from :data:`FACTS_SCRIPT` output; missing items are None.

    With several disks (md/dm over many), the facts describe the first disk that shows a
    problem (PCIe link below its maximum, SMART critical warning or media errors), else the
    first disk. Output without any section marker raises :class:`ProbeError`.
    """
    sections = _sections(text)
    if not sections:
        raise ProbeError(node, "facts output has no sections (not screener facts?)", text)
    disks = _disks(sections)
    md = None
    for header, body in sections:
        if header[0] == "mdstat":
            md = parse_mdstat(body)
    if not disks:
        return NodeFacts(md=md)
    disk = next((d for d in disks if _suspect(d)), disks[0])
    link = disk.pcie or PcieLink()
    return NodeFacts(
        device=disk.name,
        pcie_speed=link.speed,
        pcie_max_speed=link.max_speed,
        pcie_width=link.width,
        pcie_max_width=link.max_width,
        scheduler=parse_scheduler(disk.queue["scheduler"]) if "scheduler" in disk.queue else None,
        read_ahead_kb=_int_or_none(disk.queue.get("read_ahead_kb")),
        nr_requests=_int_or_none(disk.queue.get("nr_requests")),
        write_cache=_text_or_none(disk.queue.get("write_cache")),
        smart=disk.smart,
        md=md,
    )


def _sections(text: str) -> list[tuple[list[str], str]]:
    """[(header words after the mark, body text)] in output order."""
    out: list[tuple[list[str], str]] = []
    body: list[str] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            if header is not None:
                out.append((header, "\n".join(body)))
            header, body = line[len(MARK) :].split() or ["?"], []
        elif header is not None:
            body.append(line)
    if header is not None:
        out.append((header, "\n".join(body)))
    return out


def _disks(sections: list[tuple[list[str], str]]) -> list[DiskFacts]:
    order: list[str] = []
    queue: dict[str, dict[str, str]] = {}
    pcie: dict[str, dict[str, str]] = {}
    smart: dict[str, SmartLog | None] = {}
    for header, body in sections:
        kind, args = header[0], header[1:]
        if kind == "disk" and args and args[0] not in order:
            order.append(args[0])
        elif kind == "queue" and len(args) == 2:
            queue.setdefault(args[0], {})[args[1]] = body.strip()
        elif kind == "pcie" and len(args) == 2:
            pcie.setdefault(args[0], {})[args[1]] = body.strip()
        elif kind == "smart-log" and args:
            smart[args[0]] = _smart_or_none(body)
    return [
        DiskFacts(
            name=d,
            queue=queue.get(d, {}),
            pcie=parse_pcie(pcie[d]) if d in pcie else None,
            smart=smart.get(d),
        )
        for d in order
    ]


def _suspect(d: DiskFacts) -> bool:
    """A disk whose facts alone already point at a problem."""
    downgraded = d.pcie is not None and d.pcie.downgraded
    sick = d.smart is not None and (d.smart.critical_warning != 0 or d.smart.media_errors > 0)
    return downgraded or sick


def parse_scheduler(text: str) -> str | None:
    """The active I/O scheduler: the bracketed word ("mq-deadline [none]" -> "none").

    A single bare word is taken as is (some drivers list only "none"); otherwise None.
    """
    m = re.search(r"\[([^\]\s]+)\]", text)
    if m:
        return m.group(1)
    words = text.split()
    return words[0] if len(words) == 1 else None


def parse_pcie(attrs: Mapping[str, str]) -> PcieLink:
    """PcieLink from sysfs ``current_link_speed``/``max_link_speed``/``*_link_width`` texts.

    Speeds are kept as printed ("16.0 GT/s PCIe" on current kernels, "8 GT/s" on old ones);
    "Unknown" (link down or not PCIe) becomes None, as does a width of 0.
    """
    return PcieLink(
        speed=_speed(attrs.get("current_link_speed")),
        max_speed=_speed(attrs.get("max_link_speed")),
        width=_width(attrs.get("current_link_width")),
        max_width=_width(attrs.get("max_link_width")),
    )


def _speed(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if re.match(r"^\d+(\.\d+)?\s*GT/s", text) else None


def _width(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*x?(\d+)\s*", text or "")
    if m is None or int(m.group(1)) == 0:
        return None
    return int(m.group(1))


def _smart_or_none(body: str) -> SmartLog | None:
    try:
        return parse_smart_log(body)
    except ProbeError:
        return None  # nvme-cli missing rights, old device, timeout: no SMART, not a failure


def parse_smart_log(json_text: str, node: str = "?") -> SmartLog:
    """SmartLog from ``nvme smart-log -o json`` (nvme-cli 1.x and 2.x).

    nvme-cli prints the composite ``temperature`` in Kelvin (the raw NVMe field) in both
    1.x and 2.x JSON; values >= 200 are taken as Kelvin, smaller ones as Celsius already.
    A string with a unit ("35 C", "308 K") is read by its unit. ``critical_warning`` is an
    int, or with ``--verbose`` in 2.x an object whose ``value`` is the int.
    ``percent_used`` (nvme-cli) and ``percentage_used`` (smartctl's naming) both work.
    """
    start = json_text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(json_text, max(start, 0))
    except json.JSONDecodeError:
        raise ProbeError(node, "nvme smart-log output is not JSON", json_text) from None
    if not isinstance(doc, dict):
        raise ProbeError(node, "nvme smart-log JSON is not an object", json_text)
    warning = doc.get("critical_warning")
    if isinstance(warning, dict):
        warning = warning.get("value")
    used = doc.get("percent_used", doc.get("percentage_used"))
    for key, value in (
        ("critical_warning", warning),
        ("temperature", doc.get("temperature")),
        ("media_errors", doc.get("media_errors")),
        ("percent_used", used),
    ):
        if value is None:
            raise ProbeError(node, f"nvme smart-log lacks {key}", json_text)
    return SmartLog(
        critical_warning=_smart_int(warning, "critical_warning", node),
        temperature_c=_celsius(doc["temperature"], node),
        media_errors=_smart_int(doc["media_errors"], "media_errors", node),
        percentage_used=_smart_int(used, "percent_used", node),
    )


def _smart_int(value: Any, key: str, node: str) -> int:
    """nvme-cli prints 128-bit counters as numbers, some versions as numeric strings."""
    if isinstance(value, bool):
        raise ProbeError(node, f"nvme smart-log {key} is not a number", repr(value))
    if isinstance(value, float) and not math.isfinite(value):  # int() raises on NaN/inf
        raise ProbeError(node, f"nvme smart-log {key} is not finite", repr(value))
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            pass
    raise ProbeError(node, f"nvme smart-log {key} is not a number", repr(value))


def _celsius(value: Any, node: str) -> float:
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*°?\s*([CK]?)[a-z]*\s*", value)
        if not m:
            raise ProbeError(node, "nvme smart-log temperature is not a number", value)
        number, unit = float(m.group(1)), m.group(2)
        if unit == "C":
            return number
        if unit == "K":
            return round(number - 273.15, 2)
        value = number
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeError(node, "nvme smart-log temperature is not a number", repr(value))
    if not math.isfinite(value):
        raise ProbeError(node, "nvme smart-log temperature is not finite", repr(value))
    return round(float(value) - 273.15, 2) if value >= 200 else float(value)


_MD_HEAD = re.compile(r"^(md\S*)\s*:\s*(\S+)")
_MD_STATUS = re.compile(r"\[\d+/\d+\]\s*\[([U_]+)\]")
_MD_REBUILD = re.compile(r"\b(recovery|resync|reshape)\s*=")


def parse_mdstat(text: str) -> MdStatus:
    """MdStatus from /proc/mdstat.

    Degraded: the member status shows an underscore ("[2/1] [U_]"). Rebuilding: a
    recovery, resync or reshape line (running, DELAYED or PENDING). A "check" (scrub)
    line is neither, although it also loads the disks.
    """
    arrays: list[str] = []
    degraded: list[str] = []
    rebuilding: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        head = _MD_HEAD.match(line)
        if head:
            current = head.group(1)
            arrays.append(current)
            continue
        if not line.strip():
            current = None
            continue
        if current is None:
            continue
        status = _MD_STATUS.search(line)
        if status and "_" in status.group(1) and current not in degraded:
            degraded.append(current)
        if _MD_REBUILD.search(line) and current not in rebuilding:
            rebuilding.append(current)
    return MdStatus(arrays=tuple(arrays), degraded=tuple(degraded), rebuilding=tuple(rebuilding))


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _text_or_none(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    return text.strip()
