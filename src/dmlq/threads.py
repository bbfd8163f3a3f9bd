"""How many threads dmlq's compiled kernels use.

The default is the number of cores this process may run on, or the environment variable
``DMLQ_NUM_THREADS`` when it is set (read once, at import; a value that is not a positive integer
is a one-line RuntimeWarning, and the default applies). Results do not depend on the thread
count: each output element is computed by one thread with the same arithmetic. Idle threads
sleep after a short spin (about 0.1 ms), and a forked child process starts threads of its own.

>>> import dmlq
>>> previous = dmlq.get_num_threads()
>>> dmlq.set_num_threads(1)
>>> dmlq.get_num_threads()
1
>>> dmlq.set_num_threads(previous)
"""

from __future__ import annotations

import operator
import os
import warnings

from . import _core
from .errors import DmlError

__all__ = ["get_num_threads", "set_num_threads"]

ENVIRONMENT_VARIABLE = "DMLQ_NUM_THREADS"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def set_num_threads(threads: int) -> None:
    """Use ``threads`` threads (at least 1) in the compiled kernels from now on.

    A request for more threads than the CPUs this process may run on (:func:`available_cores`)
    is capped to that number, with no error: more threads than CPUs would only take turns. The
    ``DMLQ_NUM_THREADS`` variable is capped the same way.

    >>> set_num_threads(0)
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: threads: 0 is not a positive integer
    """
    try:
        count = None if isinstance(threads, bool) else operator.index(threads)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise DmlError(f"threads: {threads!r} is not a positive integer")
    _core.set_num_threads(min(count, available_cores()))


def get_num_threads() -> int:
    """The number of threads the compiled kernels use.

    >>> get_num_threads() >= 1
    True
    """
    return _core.get_num_threads()


def _threads_from_environment() -> int:
    """The variable's count; a bad value warns and gives the default, so that it cannot stop
    ``import dmlq`` (and every ``dmlq`` command, ``--help`` included)."""
    value = os.environ.get(ENVIRONMENT_VARIABLE)
    if value is None or not value.strip():
        return available_cores()
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        default = available_cores()
        # Placed at the variable, not at a source line: the warning is one line, the variable its cause.
        warnings.warn_explicit(f"{value!r} is not a positive integer; using the default, {default} threads",
                               RuntimeWarning, ENVIRONMENT_VARIABLE, 0, module=__name__)  # fmt: skip
        return default
    return threads


set_num_threads(_threads_from_environment())
