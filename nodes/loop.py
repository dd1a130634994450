"""The node runtime's event loop: uvloop where importable, else plain asyncio.

uvloop reads several datagrams per wake-up and costs less per callback (docs/architecture.md
"Flow control and overload"). Setting TESTBED_PURE_PYTHON (to anything but "" or "0") forces
the standard loop: what a bare host without uvloop runs, and what the tests check still works.
Kept free of heavy imports: the benchmark's raw fan-out processes use it too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

PURE_ENV = "TESTBED_PURE_PYTHON"


def loop_factory(tls: bool = False) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's `new_event_loop`, or None (asyncio's default) on the pure-Python path.

    A node with TLS (the `tls` transport or HTTPS management) stays on asyncio's loop: under
    uvloop's own TLS layer the `tls` transport lost its total order on the local backend and
    HTTPS management stopped answering the fault CLI (CI runs on moving to uvloop); TLS runs
    are not where throughput is measured."""
    if tls or os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]
