"""Serve the demo registry: ``python -m nodes.management --port 8778 --token T``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from nodes.management.demo import build_demo_registry
from nodes.management.server import ManagementServer


async def _serve(host: str, port: int, token: str) -> None:
    registry, *_ = build_demo_registry()
    server = ManagementServer(registry, host, port, token)
    await server.start()
    print(f"serving demo MBeans at {server.url} and http://{host}:{server.port}/metrics")
    print(f"try: curl -H 'Authorization: Bearer {token}' {server.url}/read/testbed:type=Clock")
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m nodes.management", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8778)
    parser.add_argument("--token", required=True, help="bearer token clients must send")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.token))


if __name__ == "__main__":
    main()
