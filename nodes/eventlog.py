"""The delivery log, `events.jsonl` (docs/architecture.md, "Delivery log").

One JSON object per line: t (true ns), lt (local ns), i (per-node ordinal, so that analysis
never depends on file order), node, ev, and mid/seq/slot/proto/size when meaningful.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any


class EventLog:
    def __init__(self, path: Path | None, node: str, proto: str, buffer_lines: int = 512):
        self.node = node
        self.proto = proto
        self._node_json = json.dumps(node)
        self._proto_json = json.dumps(proto)
        self._labels: dict[str, str] = {}  # instance label -> its JSON (the hot path's dumps)
        self.count = 0
        self._buf: list[str] = []
        self._limit = buffer_lines
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                # A restarted node appends: keep `i` increasing across incarnations.
                with path.open("rb") as f:
                    self.count = sum(1 for _ in f)
            self._file = path.open("a", encoding="utf-8")

    def write(self, t: int, lt: int, ev: str, **fields: Any) -> None:
        rec: dict[str, Any] = {"t": t, "lt": lt, "i": self.count, "node": self.node, "ev": ev}
        if "mid" in fields:
            rec["proto"] = self.proto
        rec.update(fields)
        self.count += 1
        self._buf.append(json.dumps(rec, separators=(",", ":")))
        if len(self._buf) >= self._limit:
            self.flush()

    def delivery(self, t: int, lt: int, ev: str, mid: str, seq: int, size: int,
                 proto: str = "") -> None:
        """The hot path (opt/fnl/recv): the same JSON as write(), formatted directly. `proto`
        names the protocol instance that produced the event (default: the node's)."""
        seq_part = f',"seq":{seq}' if seq else ""
        proto_json = (self._labels.get(proto) or self._label(proto)) if proto \
            else self._proto_json
        self._buf.append(
            f'{{"t":{t},"lt":{lt},"i":{self.count},"node":{self._node_json},"ev":"{ev}",'
            f'"proto":{proto_json},"mid":"{mid}"{seq_part},"size":{size}}}')
        self.count += 1
        if len(self._buf) >= self._limit:
            self.flush()

    def _label(self, proto: str) -> str:
        if len(self._labels) > 64:
            self._labels.clear()
        text = self._labels[proto] = json.dumps(proto)
        return text

    def flush(self) -> None:
        if self._file is not None and self._buf:
            self._file.write("\n".join(self._buf) + "\n")
            self._file.flush()
        self._buf.clear()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
