"""`token-ring`: total order by a rotating token that carries the next sequence number
(lecture notes 002 "Total Ordering: Token Based": "A token circulates among all group members.
Token carries a global sequence number"), in the form of the Totem single ring (Amir, Moser,
Melliar-Smith et al., TOCS 13(4), 1995). *Reconstructed*: the notes give two lines; the rules below
are the standard Totem ones, numbered K1-K5 here.

The ring is the members sorted by id; the token goes to `succ`. It sits directly on datagrams
and does its own recovery through the token's retransmission list:
- K1 broadcast m: queue m; messages go out only while holding the token;
- K2 on DATA(s): keep it if new, advance `my_aru` (all received up to), and deliver
  received[next_deliver] while present (agreed delivery, gap-free);
- K3 on TOKEN t: a token_seq not above the last one seen is a duplicate (discarded); else
  a. retransmit every s in t.rtr this process holds, and drop it from rtr;
  b. broadcast up to `max_per_visit` queued messages, numbering them t.seq + 1, ...;
  c. if my_aru < t.aru, or t.aru_id is me or nobody: t.aru := my_aru and t.aru_id := me
     (nobody when my_aru = t.seq);
  d. add to t.rtr every s in (my_aru, t.seq] this process misses (at most `rtr_max`);
  f. t.token_seq += 1; pass t to succ -- after `token_hold_ms` when the ring is idle (nothing
     queued, rtr empty, t.seq unchanged since this process's last visit);
- K4 until there is evidence that succ got the token (a DATA numbered above the copy's seq,
  or a later token), resend the copy every `token_retransmit_ms` from the pass (a timer
  armed with it: a periodic tick would come up to one period late, and each lost token
  would stretch a lossy ring's rotation by up to twice `token_retransmit_ms`); a duplicate
  costs one datagram and is discarded by token_seq. No token for `token_loss_ms` logs
  `token_loss` once: a crashed member breaks the ring, which is Totem's membership problem
  (out of scope);
- K5 drop received[s] once s is at most the token's aru on two successive visits (every
  member has it) and delivered here.
Safe delivery (K3e) is not implemented.

Restarts (integrity and K2's gap-free delivery): a restarted member numbering from 1 again
would collide with the old incarnation's mids; starting at next_deliver = 1 it would ask the
ring, on its first token, for everything from 1 -- numbers K5 has long dropped, so it would
deliver the first old ones again and then wait for ever -- and, as the ring's first member,
it would create a second token. So
- mnos start at `incarnation * INCARNATION_SPAN` (the sequencer's convention);
- K6 (ours) a restarted member (incarnation > 0) never creates a token; it joins at the
  first token it gets (its predecessor resends the copy it passed the crashed member, K4):
  everything up to t.seq is before its join (my_aru = t.seq, next_deliver = t.seq + 1), and
  that first visit broadcasts nothing (the token may be a stale copy whose numbers the ring
  has already used; passed on, a stale one is discarded as a duplicate by its successor);
  from the next token on it is an ordinary member;
- the token is lost when a member crashes while holding it, or after passing it before its
  successor showed it got it: nothing regenerates it (Totem's membership, out of scope), and
  `token_loss` says so in its `reason`.

Wire: the token reuses MsgType.ORDER under this protocol's id (it carries the global order):
`rseq` = token_seq, `seq` = seq, `slot` = aru, `origin` = aru_id (0xFFFF: nobody), `aux` =
ring id, payload = rtr as unsigned 32-bit numbers. DATA carries its global number in `seq`.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodes.protocols.base import (
    Action,
    Attribute,
    CommonParams,
    FinalDeliver,
    LayerBase,
    Log,
    Managed,
    ManagedHost,
    Received,
    Send,
    SetTimer,
    ms,
    param,
    typed_params,
)
from nodes.protocols.sequencer import INCARNATION_SPAN
from nodes.wire import Flag, Header, Message, MsgType

WIRE_ID = 8
NOBODY = 0xFFFF
RING_ID = 1
RETRANSMIT = int(Flag.RETRANSMIT)


@dataclass(frozen=True)
class TokenRingParams(CommonParams):
    max_per_visit: int = param(10, "messages broadcast per token visit (Appia's default)", ge=1)
    token_hold_ms: float = ms("how long an idle ring holds the token at each member", 50,
                              ge=0)
    token_retransmit_ms: float = ms("resend the token to succ until it shows it got it", 50)
    token_loss_ms: float = ms("no token for this long logs token_loss", 2000)
    rtr_max: int = param(64, "sequence numbers a token asks to retransmit at most", ge=1)


def ceiling(params: dict[str, Any], hosts: list[str], senders: int,
            path: Callable[[str, str], tuple[float, float]]) -> float:
    """The ring's throughput ceiling in messages per second: each of the `senders` broadcasts
    at most `max_per_visit` per visit (K3b), once per rotation R (`hosts` in id order, as the
    ring is sorted; `path`: a hop's one-way delay in seconds and loss fraction). R is the
    expected sum over the hops of the delay plus `token_retransmit_ms` per lost copy (K4: a
    hop losing p of its datagrams loses p / (1 - p) copies on average before one arrives):
    senders x max_per_visit / R."""
    p = typed_params(TokenRingParams, params)
    rotation = 0.0
    for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True):
        delay, loss = path(a, b)
        rotation += delay + min(loss, 0.99) / (1 - min(loss, 0.99)) * p.token_retransmit_ms / 1e3
    return senders * p.max_per_visit / rotation if rotation > 0 else math.inf


@dataclass
class Token:
    token_seq: int = 0
    seq: int = 0
    aru: int = 0
    aru_id: int = NOBODY
    rtr: list[int] | None = None


class TokenRing(LayerBase):
    def __init__(self, me: int, members: list[int], params: dict[str, Any],
                 scope: str = "tr"):
        p = typed_params(TokenRingParams, params)
        self.me = me
        ring = sorted(members)
        self.succ = ring[(ring.index(me) + 1) % len(ring)]
        self.pred = ring[ring.index(me) - 1]  # the one member that passes us the token
        self.first = ring[0]
        self.alone = len(ring) == 1
        self.max_per_visit = p.max_per_visit
        self.hold_ns = round(p.token_hold_ms * 1e6)
        self.retransmit_ns = round(p.token_retransmit_ms * 1e6)
        self.loss_ns = round(p.token_loss_ms * 1e6)
        self.rtr_max = p.rtr_max
        self.tick_key, self.hold_key = f"{scope}:tick", f"{scope}:hold"
        self.resend_key = f"{scope}:resend"
        self.instance = "" if scope == "tr" else f"token-ring#{scope}"
        self.incarnation = int(params.get("incarnation", 0))
        self.mno = self.incarnation * INCARNATION_SPAN  # mids stay unique across restarts
        self.joining = self.incarnation > 0  # K6: join at the first token
        self.pending: deque[tuple[int, bytes]] = deque()
        self.received: dict[int, Message] = {}
        self.my_aru = 0
        self.next_deliver = 1
        self.last_token_seq = 0
        self.last_visit_seq = -1  # t.seq at this process's previous visit
        self.aru_prev = 0  # t.aru at the previous visit (K5)
        self.held: Token | None = None  # the token, while holding it idle
        self.copy: Token | None = None  # the token last passed, until succ shows it got it
        self.last_token_at = 0
        self.loss_logged = False
        self.tokens_resent = 0
        self.delivered = 0

    # -- Layer interface ----------------------------------------------------------------------
    def start(self, now: int) -> list[Action]:
        self.last_token_at = now
        out: list[Action] = [SetTimer(self.tick_key, self.retransmit_ns)]
        if self.me == self.first and not self.joining:  # the first member creates the token
            out += self._on_token(Token(token_seq=1, rtr=[]), now)
        return out

    def broadcast(self, payload: bytes, now: int) -> list[Action]:
        """K1 (and, holding an idle token, use it at once)."""
        self.mno += 1
        self.pending.append((self.mno, payload))
        out: list[Action] = [Log("send", {"mno": self.mno, "size": len(payload)})]
        if self.held is not None:
            token, self.held = self.held, None
            out += self._broadcast_pending(token, now) + self._pass(token, now, idle=False)
        return out

    def roles(self) -> dict[str, int]:
        """The token (K3) comes only from the `predecessor` in the ring."""
        return {"predecessor": self.pred}

    def managed(self, host: ManagedHost) -> list[Managed]:
        return [Managed("TotalOrder", (
            Attribute("LastSeq", "int", lambda: self.next_deliver - 1,
                      description="last final-delivered sequence number"),
            Attribute("TokensResent", "int", lambda: self.tokens_resent,
                      description="token copies sent again to the successor (K4)")))]

    def on_message(self, src: int, msg: Message, now: int) -> list[Action]:
        h = msg.header
        if h.type == MsgType.DATA:
            return self._on_data(msg)
        if h.type == MsgType.ORDER and h.aux == RING_ID:
            rtr = list(struct.unpack(f"!{len(msg.payload) // 4}I", msg.payload[:len(
                msg.payload) // 4 * 4]))
            return self._on_token(Token(h.rseq, h.seq, h.slot, h.origin, rtr), now)
        return []

    def on_timer(self, key: str, now: int) -> list[Action]:
        if key == self.hold_key:
            if self.held is None:
                return []
            token, self.held = self.held, None
            return self._pass(token, now, idle=False)
        if key == self.resend_key:  # K4
            if self.copy is None:
                return []
            self.tokens_resent += 1
            return [Send(self.succ, self._token_msg(self.copy)),
                    SetTimer(self.resend_key, self.retransmit_ns)]
        out: list[Action] = [SetTimer(self.tick_key, self.retransmit_ns)]
        if key != self.tick_key:
            return out
        if (not self.loss_logged and self.held is None and not self.alone
                and now - self.last_token_at > self.loss_ns):
            self.loss_logged = True
            out.append(Log("token_loss", {
                "silent_ms": (now - self.last_token_at) / 1e6, "joining": self.joining,
                "reason": "no token regeneration: a member crashed holding the token or "
                          "before its successor got it (Totem membership, out of scope)"}))
        return out

    # -- K2: data -----------------------------------------------------------------------------
    def _on_data(self, msg: Message) -> list[Action]:
        s = msg.header.seq
        if self.copy is not None and s > self.copy.seq:
            self.copy = None  # evidence that succ got the token (K4)
        if s < self.next_deliver or s in self.received:
            return []
        self.received[s] = msg
        h = msg.header
        out: list[Action] = [Received(h.origin, h.mno, len(msg.payload), self.instance)]
        return out + self._advance()

    def _advance(self) -> list[Action]:
        while self.my_aru + 1 in self.received:
            self.my_aru += 1
        out: list[Action] = []
        while (m := self.received.get(self.next_deliver)) is not None:
            h = m.header
            self.delivered += 1
            out.append(FinalDeliver(h.origin, h.mno, self.next_deliver, len(m.payload),
                                    self.instance))
            self.next_deliver += 1
        return out

    # -- K3: the token ------------------------------------------------------------------------
    def _on_token(self, t: Token, now: int) -> list[Action]:
        if self.copy is not None and t.token_seq > self.copy.token_seq:
            self.copy = None
        if t.token_seq <= self.last_token_seq:
            return []  # a duplicate (a retransmitted copy)
        self.last_token_seq = t.token_seq
        self.last_token_at = now
        self.loss_logged = False
        if self.joining:
            return self._join(t, now)
        rtr = list(t.rtr or [])
        out: list[Action] = []
        for s in list(rtr):  # a. retransmit what others miss
            m = self.received.get(s)
            if m is not None:
                h = m.header
                out.append(Send(None, Message(h.with_(flags=h.flags | RETRANSMIT,
                                                      sender=self.me), m.payload)))
                rtr.remove(s)
        t.rtr = rtr
        seq_before = t.seq
        out += self._broadcast_pending(t, now)  # b.
        if self.my_aru < t.aru or t.aru_id in (self.me, NOBODY):  # c.
            t.aru = self.my_aru
            t.aru_id = self.me if self.my_aru < t.seq else NOBODY
        for s in range(self.my_aru + 1, t.seq + 1):  # d.
            if len(t.rtr) >= self.rtr_max:
                break
            if s not in self.received and s not in t.rtr:
                t.rtr.append(s)
        safe = min(t.aru, self.aru_prev, self.next_deliver - 1)  # K5
        self.aru_prev = t.aru
        for s in [s for s in self.received if s <= safe]:
            del self.received[s]
        idle = (t.seq == seq_before and not t.rtr and t.seq == self.last_visit_seq)
        self.last_visit_seq = t.seq
        return out + self._pass(t, now, idle)

    def _join(self, t: Token, now: int) -> list[Action]:
        """K6: everything up to t.seq is before this incarnation's join; broadcast nothing
        on this first token, only report our aru (c.) and pass it on."""
        self.joining = False
        self.my_aru = max(self.my_aru, t.seq)
        self.next_deliver = max(self.next_deliver, t.seq + 1)
        for s in [s for s in self.received if s <= t.seq]:
            del self.received[s]
        out: list[Action] = [Log("join", {"seq": t.seq, "token_seq": t.token_seq})]
        out += self._advance()
        if self.my_aru < t.aru or t.aru_id in (self.me, NOBODY):
            t.aru = self.my_aru
            t.aru_id = self.me if self.my_aru < t.seq else NOBODY
        self.aru_prev = t.aru
        self.last_visit_seq = t.seq
        return out + self._pass(t, now, idle=False)

    def _broadcast_pending(self, t: Token, now: int) -> list[Action]:
        out: list[Action] = []
        for _ in range(min(self.max_per_visit, len(self.pending))):
            mno, payload = self.pending.popleft()
            t.seq += 1
            msg = Message(Header(MsgType.DATA, WIRE_ID, sender=self.me, origin=self.me,
                                 mno=mno, seq=t.seq, ts=now), payload)
            self.received[t.seq] = msg
            out.append(Send(None, msg))
        return out + self._advance() if out else out

    def _pass(self, t: Token, now: int, idle: bool) -> list[Action]:
        """f. Pass the token on (after token_hold_ms when the ring is idle)."""
        if idle and self.hold_ns:
            self.held = t
            return [SetTimer(self.hold_key, self.hold_ns)]
        t.token_seq += 1
        if self.alone:
            self.last_token_seq = t.token_seq
            self.held = t
            return [SetTimer(self.hold_key, self.hold_ns or self.retransmit_ns)]
        self.copy = Token(t.token_seq, t.seq, t.aru, t.aru_id, list(t.rtr or []))
        return [Send(self.succ, self._token_msg(t)), SetTimer(self.resend_key, self.retransmit_ns)]

    def _token_msg(self, t: Token) -> Message:
        rtr = t.rtr or []
        return Message(Header(MsgType.ORDER, WIRE_ID, sender=self.me, rseq=t.token_seq,
                              origin=t.aru_id, seq=t.seq, slot=t.aru, aux=RING_ID),
                       struct.pack(f"!{len(rtr)}I", *rtr))
