"""No exception escapes a node's runtime callbacks (docs/security.md): it becomes ev=error in the
event log with its traceback on stderr, and the timer it belonged to is re-armed."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest

from nodes.config import Member, NodeConfig, WorkloadConfig
from nodes.runtime import NodeRuntime


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_raising_timer_is_logged_and_re_armed(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    members = [Member(0, "h1", "127.0.0.1", _port()), Member(1, "h2", "127.0.0.1", _port())]
    log = tmp_path / "h1" / "events.jsonl"
    cfg = NodeConfig(node_id=0, name="h1", members=members, protocol="sequencer",
                     params={"fd_interval_ms": 20}, log_path=str(log), seed=1,
                     start_at_ns=time.time_ns(), duration_ns=600_000_000, drain_ns=0)
    ticks: list[int] = []

    async def main() -> None:
        node = NodeRuntime(cfg)
        real = node.core.timer

        def flaky(key: str, t: int):  # type: ignore[no-untyped-def]
            if key == "fd:tick":
                ticks.append(t)
                if len(ticks) <= 2:
                    raise KeyError("a bug in the failure detector")
            return real(key, t)

        node.core.timer = flaky  # type: ignore[method-assign]
        node.on_datagram(b"\x00" * 3)  # malformed: counted, not raised
        await node.run()

    asyncio.run(main())
    events = [json.loads(line) for line in log.read_text().splitlines()]
    errors = [e for e in events if e["ev"] == "error"]
    assert [e["where"] for e in errors] == ["timer fd:tick", "timer fd:tick"]
    assert "KeyError" in errors[0]["error"]
    assert len(ticks) >= 4  # ticked on after both failures (every 20 ms for 0.6 s)
    assert events[-1]["ev"] == "stop" and events[-1]["errors"] == 2
    assert events[-1]["malformed"] == 1
    err = capsys.readouterr().err
    assert err.count("Traceback") == 2 and "a bug in the failure detector" in err


def test_a_raising_datagram_or_workload_callback_is_logged_and_the_node_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other callbacks docs/security.md names: a datagram's and the workload's."""
    members = [Member(0, "h1", "127.0.0.1", _port()), Member(1, "h2", "127.0.0.1", _port())]
    log = tmp_path / "h1" / "events.jsonl"
    cfg = NodeConfig(node_id=0, name="h1", members=members, protocol="sequencer",
                     params={}, log_path=str(log), seed=1, start_at_ns=time.time_ns(),
                     duration_ns=600_000_000, drain_ns=0,
                     workload=WorkloadConfig(True, 50.0, 16))
    offered: list[int] = []

    async def main() -> None:
        node = NodeRuntime(cfg)
        receive, broadcast = node.core.receive, node.core.broadcast

        def bad_receive(data: bytes, t: int):  # type: ignore[no-untyped-def]
            raise ValueError("a bug on the receive path")

        def flaky_broadcast(t: int):  # type: ignore[no-untyped-def]
            offered.append(t)
            if len(offered) == 1:
                raise IndexError("a bug on the send path")
            return broadcast(t)

        node.core.receive = bad_receive  # type: ignore[method-assign]
        node.core.broadcast = flaky_broadcast  # type: ignore[method-assign]
        node.on_datagram(b"\x00" * 3)
        node.core.receive = receive  # type: ignore[method-assign]
        await node.run()

    asyncio.run(main())
    events = [json.loads(line) for line in log.read_text().splitlines()]
    errors = [e for e in events if e["ev"] == "error"]
    assert [e["where"] for e in errors] == ["datagram", "broadcast"]
    assert "ValueError" in errors[0]["error"] and "IndexError" in errors[1]["error"]
    assert len(offered) > 2  # the workload went on after the failure
    assert [e for e in events if e["ev"] == "send"]
    assert events[-1]["ev"] == "stop" and events[-1]["errors"] == 2
    assert capsys.readouterr().err.count("Traceback") == 2
