"""The alerting rules an admin includes as is (deploy/prometheus/screener-rules.yml):
promtool checks them and runs their unit tests (series that fire and series that must
not, in screener-rules.test.yml). The same rules against a real Prometheus scraping the
exporter: tests/test_exporter_prometheus.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

RULES_DIR = Path(__file__).parent.parent / "deploy" / "prometheus"
RULES = RULES_DIR / "screener-rules.yml"
PROMTOOL = "/usr/bin/promtool"  # Debian package prometheus (`make apt`)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool is not installed: `make apt` (Debian package prometheus)")
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )


def test_promtool_check_rules() -> None:
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    done = _promtool("test", "rules", "screener-rules.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _alerts() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_alert_has_a_runbook_naming_a_command_and_a_unit_test() -> None:
    tests = (RULES_DIR / "screener-rules.test.yml").read_text()
    for rule in _alerts():
        name = rule["alert"]
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert re.search(r"`(screener|sinfo|systemctl|journalctl) [^`]+`", annotations["runbook"])
        # fired at least once in the unit tests (exp_alerts non-empty after its name)
        fired = re.search(rf"alertname: {name}\n\s+exp_alerts:\n\s+- exp_labels", tests)
        silent = re.search(rf"alertname: {name}\n\s+exp_alerts: \[\]", tests)
        assert fired and silent, name


def test_a_broken_rule_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: a threshold moved past the firing series is caught."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("> 0.1\n", "> 0.3\n"))
    test = tmp_path / "screener-rules.test.yml"
    test.write_text((RULES_DIR / test.name).read_text())
    done = subprocess.run(
        [PROMTOOL, "test", "rules", test.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "ScreenerBlind" in done.stdout + done.stderr
