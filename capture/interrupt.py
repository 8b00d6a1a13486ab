"""Ctrl-C during training, taken at a step's end (:class:`StopRequest`, read by
:func:`capture.train.fit`)."""

from __future__ import annotations

import signal
import threading
from typing import Any


class StopRequest:
    """Ctrl-C during training, taken at a step's end: while inside, SIGINT only sets
    :attr:`requested`, which :func:`fit` reads after each step; it then saves a checkpoint
    and raises KeyboardInterrupt, so a stopped run resumes from that step (bit for bit, as
    from any checkpoint) and is never torn between a gradient and its update. A step takes
    well under a second at the experiments' sizes, so the stop is prompt.

    Only where Python handles signals (the main thread) and where SIGINT is not ignored (a
    background job's); elsewhere it changes nothing and ``requested`` stays False.
    """

    #: A SIGINT that came while this process was not training (a training process of
    #: ``layerstate run --jobs``, between or before its runs: :meth:`note` is its handler then):
    #: the next training stops at its first step's end.
    pending = False

    def __init__(self) -> None:
        self.requested = StopRequest.pending
        self._previous: Any = None

    @staticmethod
    def note(_signum: int, _frame: Any) -> None:
        StopRequest.pending = True

    def _take(self, _signum: int, _frame: Any) -> None:
        self.requested = True
        if self._previous is StopRequest.note:  # a training process: the units queued to it stop too
            StopRequest.pending = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
            self._previous = signal.signal(signal.SIGINT, self._take)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
