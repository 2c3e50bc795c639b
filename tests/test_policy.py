"""Policy loading: defaults, overrides, and one-line errors for bad config."""

from __future__ import annotations

from pathlib import Path

import pytest

from screener.app import screen_policy
from screener.errors import ConfigError
from screener.policy import Policy, database_url, load_policy, policy_from_dict

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "screener.toml"
    p.write_text(text)
    return p


def test_example_config_in_deploy_loads_and_equals_the_defaults() -> None:
    # deploy/screener.toml documents every key with its default: it must stay in sync
    assert load_policy(REPO / "deploy" / "screener.toml") == Policy()


def test_overrides_and_int_for_float(tmp_path: Path) -> None:
    p = load_policy(write(tmp_path, "[probe]\nruntime_s = 2\nsize_mib = 256\n"))
    assert p.probe.runtime_s == 2.0 and isinstance(p.probe.runtime_s, float)
    assert p.probe.size_mib == 256
    assert p.verdict == Policy().verdict


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[probe]\nruntme_s = 2\n", "unknown config key probe.runtme_s"),
        ("[prob]\nruntime_s = 2\n", "unknown config section [prob]"),
        ("[probe]\nsize_mib = '1G'\n", "config key probe.size_mib has the wrong type (str)"),
        ("[probe]\nioengine = 'psync'\n", "config key probe.ioengine must be one of"),
        ("[transport]\nkind = 'rsh'\n", "config key transport.kind must be one of"),
        ("[verdict]\nconfirm = 1\n", "config key verdict.confirm has the wrong type (int)"),
        ("[probe]\ntarget = 'scratch'\n", "probe.target must be an absolute path"),
        ("[probe\n", "is not valid TOML"),
    ],
)
def test_bad_config_is_one_line_config_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_policy(write(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(tmp_path / "nope.toml")


def test_database_url_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    p = policy_from_dict({"store": {"url": "sqlite:////tmp/a.db"}})
    monkeypatch.delenv("SCREENER_DATABASE_URL", raising=False)
    assert database_url(p) == "sqlite:////tmp/a.db"
    monkeypatch.setenv("SCREENER_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert database_url(p) == "postgresql+psycopg://u@h/db"


def test_screen_policy_overrides() -> None:
    p = screen_policy(Policy(), local=True, target="/tmp/x", confirm=False)
    assert p.transport.kind == "local" and p.probe.target == "/tmp/x"
    assert p.verdict.confirm is False
    with pytest.raises(ConfigError, match="absolute path"):
        screen_policy(Policy(), target="relative/dir")
