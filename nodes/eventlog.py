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
        self._heads: dict[str, str] = {}  # delivery()'s line pieces per ev (and instance)
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

    def delivery(self, t: int, lt: int, ev: str, origin: str, mno: int, seq: int, size: int,
                 proto: str = "") -> None:
        """The hot path (opt/fnl/recv/send of mid `origin:mno`): the same JSON as write(),
        formatted directly, the mid within the line rather than built as a string of its own
        first. `proto` names the protocol instance that produced the event (default: the
        node's). What does not change from line to line (node, ev, proto) is one cached piece
        per (ev, proto)."""
        head = self._heads.get(ev) if not proto else self._heads.get(f"{ev}\0{proto}")
        if head is None:
            head = self._head(ev, proto)
        ts = str(t)
        lts = ts if lt == t else str(lt)  # an unskewed clock: one conversion, not two
        if seq:
            line = (f'{{"t":{ts},"lt":{lts},"i":{self.count}{head}{origin}:{mno}","seq":{seq},'
                    f'"size":{size}}}')
        else:
            line = (f'{{"t":{ts},"lt":{lts},"i":{self.count}{head}{origin}:{mno}",'
                    f'"size":{size}}}')
        self._buf.append(line)
        self.count += 1
        if len(self._buf) >= self._limit:
            self.flush()

    def _head(self, ev: str, proto: str) -> str:
        """`,"node":…,"ev":…,"proto":…,"mid":"` for `ev` by instance `proto` ("": the node's
        protocol), cached (a bounded number: instance labels may keep coming)."""
        if len(self._heads) > 256:
            self._heads.clear()
        proto_json = json.dumps(proto) if proto else self._proto_json
        head = f',"node":{self._node_json},"ev":"{ev}","proto":{proto_json},"mid":"'
        self._heads[f"{ev}\0{proto}" if proto else ev] = head
        return head

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
