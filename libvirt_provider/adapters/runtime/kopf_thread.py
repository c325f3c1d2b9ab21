"""A kopf operator on a thread of its own, with its own event loop, stoppable from outside.

The daemon runs two: the LibvirtMachine controller's, always, and the generic controller's while
this daemon leads. kopf's own signal handling is off (the daemon's main thread owns the signals).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import kopf

__all__ = ["OperatorThread"]

log = logging.getLogger(__name__)


class OperatorThread:
    """A kopf operator on a thread of its own, stoppable from outside."""

    def __init__(
        self,
        name: str,
        registry: kopf.OperatorRegistry,
        settings: Any,
    ) -> None:
        self.name = name
        self._registry = registry
        self._settings = settings
        self._stop = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            with asyncio.Runner() as runner:
                runner.get_loop().set_exception_handler(_quiet_watch_finalization)
                runner.run(
                    kopf.operator(
                        registry=self._registry,
                        settings=self._settings,
                        standalone=True,
                        clusterwide=True,
                        stop_flag=self._stop,
                        ready_flag=self.ready,
                    )
                )
        except Exception:
            log.exception("operator %s ended with an error", self.name)
        finally:
            log.info("operator %s stopped", self.name)

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()


def _quiet_watch_finalization(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler, minus one known harmless report.

    An operator stopped while a watch stream is being (re)opened leaves kopf's `infinite_watch`
    generator suspended; the runner closes it at shutdown, and kopf's context manager inside it
    awaits once more, which asyncio reports with two tracebacks. Nothing is lost: the operator
    is stopping and the stream's connection is closed with the loop.
    """
    asyncgen = context.get("asyncgen")
    if (
        str(context.get("message", "")).startswith(
            "an error occurred during closing of asynchronous"
        )
        and getattr(asyncgen, "__qualname__", "") == "infinite_watch"
    ):
        log.debug("kopf's watch stream closed at shutdown: %s", context.get("exception"))
        return
    loop.default_exception_handler(context)
