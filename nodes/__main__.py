"""`python -m nodes --config node.json`: run one protocol node, or the host agent of a
Maelstrom node program (see nodes/config.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nodes.config import NodeConfig
from nodes.runtime import run_node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodes", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="node configuration JSON")
    args = parser.parse_args(argv)
    try:
        cfg = NodeConfig.read(args.config)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"nodes: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    if cfg.maelstrom:
        from nodes.agent import run_agent  # a user's Maelstrom program (docs/maelstrom.md)

        run_agent(cfg)
        return 0
    run_node(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
