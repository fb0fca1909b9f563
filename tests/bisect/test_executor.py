"""Slot planning and the local executor's bookkeeping (threads, cancel, fatal errors)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from vllm_bisect.bisect.measurement.executor import LocalExecutor, Slot, parse_gpus, plan_slots
from vllm_bisect.errors import SpecError, ToolMissing
from vllm_bisect.models import EvalStatus, Evaluation


def test_parse_gpus() -> None:
    assert parse_gpus(None, 8) is None
    assert parse_gpus("0,1,2,3", 0) == [0, 1, 2, 3]
    assert parse_gpus([4, 5], 0) == [4, 5]
    assert parse_gpus("auto", 3) == [0, 1, 2]
    with pytest.raises(SpecError, match="found no GPU"):
        parse_gpus("auto", 0)
    with pytest.raises(SpecError, match="distinct"):
        parse_gpus("1,1", 0)


def test_plan_slots() -> None:
    assert plan_slots(3, None, 1) == [Slot(0), Slot(1), Slot(2)]
    assert plan_slots(1, [0, 1, 2, 3], 1) == [Slot(i, (i,)) for i in range(4)]
    assert plan_slots(1, [0, 1, 2, 3], 2) == [Slot(0, (0, 1)), Slot(1, (2, 3))]
    assert plan_slots(2, [0, 1, 2, 3, 4, 5, 6, 7], 2) == [Slot(0, (0, 1)), Slot(1, (2, 3))]
    with pytest.raises(SpecError, match="needs 6 GPUs"):
        plan_slots(3, [0, 1, 2, 3], 2)
    with pytest.raises(SpecError, match="does not fit"):
        plan_slots(1, [0], 2)


class Slow:
    """An evaluation that runs until told to stop (stands in for a long server start)."""

    def __init__(self) -> None:
        self.devices: list[Sequence[int] | None] = []

    def __call__(self, commit: str, more: object, *, devices: Sequence[int] | None,
                 cancel: threading.Event | None) -> Evaluation:
        self.devices.append(devices)
        assert cancel is not None
        if commit.startswith("fatal"):
            raise ToolMissing("uv is not installed")
        if commit.startswith("fast"):
            return Evaluation(commit=commit, status=EvalStatus.UNAVAILABLE, reason="none")
        cancel.wait(30)
        return Evaluation(commit=commit, status=EvalStatus.CANCELLED)


def test_cancel_and_close(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path))
    fn = Slow()
    ex = LocalExecutor(fn, plan_slots(1, [0, 1], 1), session="s")
    a = ex.submit("slow-a")
    ex.submit("fast-b")
    assert ex.in_flight() == 2
    done = ex.wait(timeout=10)
    assert [d.commit for d in done] == ["fast-b"] and ex.in_flight() == 1
    t0 = time.monotonic()
    ex.cancel(a)
    (d,) = ex.wait(timeout=10)
    assert d.cancelled and time.monotonic() - t0 < 5
    assert sorted(x for x in fn.devices if x) == [(0,), (1,)]
    ex.submit("slow-c")
    ex.close()  # Ctrl-C: everything in flight is stopped and joined
    assert ex.in_flight() == 0


def test_fatal_error_in_a_worker_reaches_the_driver() -> None:
    ex = LocalExecutor(Slow(), plan_slots(2, None, 1))
    ex.submit("fatal-a")
    with pytest.raises(ToolMissing):
        ex.wait(timeout=10)
    ex.close()
