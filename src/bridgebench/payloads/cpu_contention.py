"""How busy the node was with *other* work while a benchmark timed itself: a timing taken under contention must say so.

:class:`LoadProbe` reads the machine-wide CPU times and this process's own CPU time (threads included) at the start
and the end of a window, with psutil (``psutil.cpu_times()`` = ``/proc/stat``'s ``cpu`` line on Linux,
``psutil.Process().cpu_times()`` = ``/proc/<pid>/stat``):

* ``busy_share``: fraction of the machine's CPU capacity (all logical CPUs, the window's length) that was busy --
  ``(total - idle - iowait) / total`` of the CPU-time deltas;
* ``own_share``: the part this process used (its user + system time / total);
* ``other_share`` = ``max(0, busy_share - own_share)``: what everything else used; ``other_cpus`` = ``other_share x
  cpus`` (equivalent CPUs busy with other work); ``steal_share`` (a VM's hypervisor taking CPUs away);
* ``loadavg_1m`` at the start and the end (``os.getloadavg``).

The optimizer-step payload records these raw figures for its timing window; ``bridgebench report`` decides what
counts as contended (:data:`bridgebench.results.optstep_stats.CONTENDED_OTHER_SHARE`). GPU contention (another
process on the same GPU) is not measured here; ``sbatch --exclusive`` keeps other SLURM jobs off the node.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any


def _system():
    import psutil

    t = psutil.cpu_times()
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # guest* are inside user/nice
    values = {f: float(getattr(t, f, 0.0)) for f in fields}
    return values


def _own() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


@dataclass(kw_only=True)
class LoadProbe:
    """CPU load of other processes over a window: :meth:`start`, the timed work, :meth:`stop`, :meth:`result`."""

    _t0: float = 0.0
    _sys0: dict[str, float] = field(default_factory=dict)
    _own0: float = 0.0
    _load0: float | None = None
    _out: dict[str, Any] | None = None

    @classmethod
    def start(cls) -> LoadProbe:
        """A probe whose window starts now."""
        p = cls()
        p._load0 = _loadavg()
        p._sys0, p._own0, p._t0 = _system(), _own(), time.monotonic()
        return p

    def stop(self) -> dict[str, Any]:
        """End the window; returns :meth:`result`."""
        sys1, own1, t1 = _system(), _own(), time.monotonic()
        import psutil

        delta = {k: max(0.0, sys1[k] - self._sys0.get(k, 0.0)) for k in sys1}
        total = sum(delta.values())
        busy = total - delta["idle"] - delta["iowait"]
        own = max(0.0, own1 - self._own0)
        cpus = psutil.cpu_count() or 1
        share = (lambda x: x / total) if total > 0 else (lambda x: None)
        other = share(max(0.0, busy - own))
        self._out = {
            "source": "psutil.cpu_times (/proc/stat) vs psutil.Process().cpu_times",
            "window_s": t1 - self._t0,
            "cpus": cpus,
            "busy_share": share(busy),
            "own_share": share(min(own, busy)),
            "other_share": other,
            "other_cpus": other * cpus if other is not None else None,
            "steal_share": share(delta["steal"]),
            "loadavg_1m_start": self._load0,
            "loadavg_1m_end": _loadavg(),
        }
        return self._out

    def result(self) -> dict[str, Any] | None:
        """The figures of the finished window (None before :meth:`stop`)."""
        return self._out


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
