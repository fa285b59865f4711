"""The machine under a measurement: how busy other processes kept it, a process's (or its threads') CPU time, a free port.

Timings on a shared machine are noisy; the programs that compare two systems say, per run, how
many cores other processes kept busy meanwhile (from /proc/stat, minus the run's own CPU time),
and flag the runs above ``DISTURBED``.
"""

from __future__ import annotations

import os
import socket

DISTURBED = 0.25  # cores used by other processes above which a run is flagged as disturbed


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux /proc/stat), else None."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def others_busy(busy0: float | None, own_cpu: float, wall: float) -> float | None:
    """Cores kept busy by other processes over ``wall`` seconds: the machine's busy time minus ours."""
    busy1 = busy_seconds()
    if busy0 is None or busy1 is None or wall <= 0:
        return None
    return max(0.0, (busy1 - busy0 - own_cpu) / wall)


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from /proc; None off Linux."""
    return _stat_cpu(f"/proc/{pid}/stat")


def thread_cpu(pid: int) -> dict[int, float] | None:
    """CPU seconds each thread of process ``pid`` has used, by thread id, from /proc; None off Linux."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    got = {int(tid): _stat_cpu(f"/proc/{pid}/task/{tid}/stat") for tid in tids}
    return {tid: cpu for tid, cpu in got.items() if cpu is not None}  # a thread that ended meanwhile is left out


def _stat_cpu(path: str) -> float | None:
    """user + system seconds from a /proc ``stat`` file (its fields after the command's name)."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def load_average() -> str:
    """The 1-minute load average, as text ("?" where the system gives none)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a server to listen on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
