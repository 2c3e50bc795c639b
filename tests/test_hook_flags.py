"""A flag a hook was given reaches the processes it starts (issue 25's class of gap): the
prolog's `screener release` helper inherits its environment, so the prolog names the policy
file it was given there (explicitly), not whatever the hook's environment said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from screener.cli import main


def test_the_prolog_hands_its_config_to_the_processes_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "site.toml"
    config.write_text("[prolog]\nfail_closed = false\n")
    monkeypatch.setenv("SCREENER_CONFIG", str(tmp_path / "stale.toml"))  # the hook's env
    for key in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "site.toml", "prolog"]) == 0  # no job: fails open
    assert "cannot read the job" in capsys.readouterr().err
    assert os.environ["SCREENER_CONFIG"] == str(config)  # what `screener release` will read
