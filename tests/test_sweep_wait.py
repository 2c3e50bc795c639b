"""sweep/wait.py: following a sweep job to its end, on a scripted job history and clock
(the real path, sbatch then squeue on real Slurm, is every `sweep --submit --wait` in
tests/test_sweep.py and tests/test_sweep_mode.py)."""

from __future__ import annotations

from collections.abc import Sequence

from screener.errors import SlurmError
from screener.slurm.client import SlurmJob, SlurmNode
from screener.sweep.wait import POLL_FIRST_S, POLL_MAX_S, next_poll, wait_for_job


class _History:
    """A SlurmClient whose job() answers from a list, one entry a call (the last repeats);
    the clock advances only by the waits asked for."""

    name = "scripted"

    def __init__(self, answers: Sequence[SlurmJob | SlurmError | None]) -> None:
        self.answers = list(answers)
        self.now = 0.0
        self.sleeps: list[float] = []

    def job(self, job_id: str) -> SlurmJob | None:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, SlurmError):
            raise answer
        return answer

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        raise AssertionError("not asked")

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        raise AssertionError("not asked")

    def resume(self, nodes: Sequence[str]) -> None:
        raise AssertionError("not asked")

    def release(self, job_id: str) -> None:
        raise AssertionError("not asked")


class _EndsAt(_History):
    """A job RUNNING until ``t`` seconds of the scripted clock, COMPLETED from then on."""

    def __init__(self, t: float) -> None:
        super().__init__([])
        self.t = t

    def job(self, job_id: str) -> SlurmJob | None:
        return _job("COMPLETED" if self.now >= self.t else "RUNNING")


def _job(state: str) -> SlurmJob:
    return SlurmJob("7", ("n1",), state=state)


def _wait(h: _History, timeout: float = 600.0) -> tuple[int, str | None, str]:
    end = wait_for_job(h, "7", timeout, clock=lambda: h.now, sleep=h.sleep)
    return end.exit_status, end.state, end.detail


def test_a_short_job_is_seen_ended_within_seconds_not_sbatchs_32() -> None:
    # pending, running 14 s, then completed: seen at most POLL_MAX_S after it ended
    h = _History([_job("PENDING")] + [_job("RUNNING")] * 6 + [_job("COMPLETED")])
    assert _wait(h) == (0, "COMPLETED", "COMPLETED")
    assert h.sleeps[0] == POLL_FIRST_S and max(h.sleeps) <= POLL_MAX_S
    assert h.sleeps == sorted(h.sleeps)  # backs off, never faster again
    assert next_poll(0.0) == POLL_FIRST_S and next_poll(3600.0) == POLL_MAX_S


def test_an_end_is_seen_within_a_tenth_of_the_wait_or_5_s() -> None:
    """Jobs of 1 s to 10 min: each is seen ended no later than max(0.25 s, 10 % of its
    run) after it ended, capped at POLL_MAX_S (doubling saw a 5 s job 2.3 s late)."""
    for ends_at in (1.0, 4.9, 5.1, 8.0, 14.0, 60.0, 600.0):
        h = _EndsAt(ends_at)
        assert _wait(h, timeout=3600.0)[:2] == (0, "COMPLETED")
        late = h.now - ends_at
        assert 0 <= late <= min(POLL_MAX_S, max(POLL_FIRST_S, 0.1 * h.now)) + 1e-9, (ends_at, h.now)
    # a minute's job: a few dozen queries, not hundreds
    h2 = _History([_job("RUNNING")] * 40 + [_job("COMPLETED")])
    _wait(h2)
    assert h2.now >= 15 and len(h2.sleeps) == 40


def test_a_failed_requeued_or_cancelled_job_exits_1_with_its_state() -> None:
    assert _wait(_History([_job("RUNNING"), _job("FAILED")]))[:2] == (1, "FAILED")
    requeued = _History([_job("RUNNING"), _job("REQUEUED"), _job("PENDING"), _job("CANCELLED")])
    assert _wait(requeued)[:2] == (1, "CANCELLED")


def test_slurm_errors_are_retried_and_a_forgotten_job_is_not_called_a_success() -> None:
    h = _History([SlurmError("squeue --json failed: timeout"), _job("RUNNING"), None])
    code, state, detail = _wait(h)
    assert (code, state) == (1, None) and "no longer knows it" in detail


def test_the_wait_ends_at_its_timeout_and_says_the_last_thing_seen() -> None:
    h = _History([SlurmError("squeue --json failed: Unable to contact slurm controller")])
    code, state, detail = _wait(h, timeout=30.0)
    assert (code, state) == (1, None)
    assert detail.startswith("not ended after 30 s (last query failed: squeue")
    assert abs(h.now - 30.0) < 1e-9  # never slept past the timeout
    running = _History([_job("RUNNING")])
    assert _wait(running, timeout=12.0)[2] == "not ended after 12 s (still RUNNING)"
