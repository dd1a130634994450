"""Sources are cited as docs/references.md names them: paper id plus section, figure,
equation or (for the lecture notes 002) slide title, never by line numbers of a plain-text
transcription (`002 L120-181`, `(L663)`), which readers of the published papers cannot follow.

Rule names of one or two characters (`L0`-`L4` of `lamport`, `L4(d)` of `qos-vbr`) and
lines of a paper's own pseudo-code figure (`Fig. 2.1 l.13`) are not transcription lines.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".yaml")
SKIP_DIRS = {".venv", "build", "runs", ".git", "node_modules", "__pycache__"}
LINE_CITATION = re.compile(r"\bL[0-9]{2,}\b")


def line_citations(text: str) -> list[str]:
    """The lines of `text` that cite a transcription line number."""
    return [line for line in text.splitlines() if LINE_CITATION.search(line)]


def test_the_pattern_flags_line_citations_and_spares_rule_names() -> None:
    for cited in ("(002 L120-181)", "001 sec. 2 L132: the", "(L54-66).", "§4.1 L206",
                  "no clock synchrony (L663)", "002 L156-167: a message"):
        assert line_citations(cited), cited
    for fine in ('002 "Reliable FIFO: Positive Acknowledgement"', "L0: ask for WELCOMEs",
                 "if q and q[0].slot > self.dslot:  # L4(d)", "(prose §2.1; 0 = Fig. 2.1 l.13)",
                 "every backend's data plane is one L2 segment", "004 §7.2, Thm 5",
                 "`L1`-`L4`"):
        assert not line_citations(fine), fine


def test_no_source_is_cited_by_transcription_line() -> None:
    me = Path(__file__).resolve()
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not name.endswith(SUFFIXES) or path.resolve() == me:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            rel = path.relative_to(ROOT)
            found += [f"{rel}: {line.strip()}" for line in line_citations(text)]
    assert not found, "line-number citations:\n" + "\n".join(found)
