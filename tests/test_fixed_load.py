"""fixed_load's host CPU a token: llama.cpp's compute threads, which spin between passes, told
apart from the server's other threads by their share of the load's wall time."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "serving"))

from _shared.machine import thread_cpu  # noqa: E402
from fixed_load import host_cpu  # noqa: E402


def test_threads_busy_more_than_half_the_wall_are_the_compute_threads():
    before = {1: 10.0, 2: 10.0, 3: 1.0}
    after = {1: 20.0, 2: 19.5, 3: 1.3, 4: 0.2}  # thread 4 started during the load
    got = host_cpu(before, after, wall=10.0)
    assert got["compute_threads"] == 2
    assert got["host_cpu"] == pytest.approx(0.5)


def test_without_proc_nothing_is_claimed():
    assert host_cpu(None, {1: 1.0}, 1.0) == {}
    assert host_cpu({1: 1.0}, None, 1.0) == {}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread CPU is read from Linux /proc")
def test_a_thread_that_works_shows_its_cpu_and_one_that_sleeps_does_not():
    me = threading.get_native_id()
    sleeper_id: list[int] = []
    go = threading.Event()

    def sleeper() -> None:
        sleeper_id.append(threading.get_native_id())
        go.wait()

    t = threading.Thread(target=sleeper)
    t.start()
    while not sleeper_id:
        time.sleep(0.001)
    before = thread_cpu(os.getpid())
    end = time.thread_time() + 0.3
    while time.thread_time() < end:
        pass
    after = thread_cpu(os.getpid())
    go.set()
    t.join()
    assert before is not None and after is not None
    assert after[me] - before[me] >= 0.2
    assert after[sleeper_id[0]] - before[sleeper_id[0]] < 0.05
