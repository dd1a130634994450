"""The `udp-aead` transport: every datagram sealed with AES-GCM under the run's key.

GORDA D3.5 section 4.4 asks for secured node communication; this keeps UDP's loss and
reordering semantics (so every protocol, QoS ones included, runs over it unchanged) and adds
authentication, integrity, payload confidentiality and replay protection. A sealed datagram::

    [44-byte wire header, clear] [counter, 8 bytes] [AES-GCM(payload) + 16-byte tag]

- the header stays readable (capture dissectors still see message types and numbers) and is
  authenticated as associated data together with the counter, so no field of it -- sender id
  included -- can be changed or forged without the key;
- the nonce is (sender id, counter): the counter is `incarnation << 40 | n`, n counting this
  process's datagrams from 1, so a (key, nonce) pair is never used twice, restarts included;
- each receiver keeps a replay window per sender (RFC 4303 section 3.4.3 style: the highest
  counter seen and a bitmap of the `REPLAY_WINDOW` below it); a datagram seen before, or older
  than the window, is refused.

The key is 32 random bytes the orchestrator makes per run (`RunDir.transport_key`, mode
0600), handed to nodes in their node.json. Not protected: who may read the run directory, and
traffic analysis (sizes, timing, header fields are visible).
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from nodes.wire import HEADER_SIZE

COUNTER = struct.Struct("!Q")
NONCE = struct.Struct("!IQ")  # sender id, counter: 12 bytes
SENDER = struct.Struct("!H")  # at offset 6 of the wire header
TAG_SIZE = 16
OVERHEAD = COUNTER.size + TAG_SIZE
REPLAY_WINDOW = 4096
INCARNATION_SHIFT = 40


class SealError(ValueError):
    """A datagram that does not open: `reason` is short, "auth" or "replay" or "short"."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class Sealer:
    def __init__(self, key: bytes, incarnation: int = 0):
        if len(key) not in (16, 24, 32):
            raise ValueError(f"an AES-GCM key has 16, 24 or 32 bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self._counter = incarnation << INCARNATION_SHIFT
        # Per sender: (highest counter accepted, bitmap of the window below it; bit i set
        # means highest - i was accepted).
        self._seen: dict[int, tuple[int, int]] = {}

    def seal(self, datagram: bytes) -> bytes:
        self._counter += 1
        header = datagram[:HEADER_SIZE]
        (sender,) = SENDER.unpack_from(header, 6)
        counter = COUNTER.pack(self._counter)
        body = self._aead.encrypt(NONCE.pack(sender, self._counter), datagram[HEADER_SIZE:],
                                  header + counter)
        return header + counter + body

    def open(self, sealed: bytes) -> bytes:
        """The plain datagram, or SealError. The replay window moves only for datagrams
        that authenticate, so forgeries cannot push honest ones out of it."""
        if len(sealed) < HEADER_SIZE + OVERHEAD:
            raise SealError(f"sealed datagram of {len(sealed)} bytes is too short", "short")
        header = sealed[:HEADER_SIZE]
        (sender,) = SENDER.unpack_from(header, 6)
        (counter,) = COUNTER.unpack_from(sealed, HEADER_SIZE)
        highest, bits = self._seen.get(sender, (0, 0))
        if counter <= highest and (highest - counter >= REPLAY_WINDOW
                                   or bits >> (highest - counter) & 1):
            raise SealError(f"counter {counter} from {sender} replayed or too old", "replay")
        try:
            payload = self._aead.decrypt(NONCE.pack(sender, counter),
                                         sealed[HEADER_SIZE + COUNTER.size:],
                                         sealed[:HEADER_SIZE + COUNTER.size])
        except InvalidTag:
            raise SealError(f"datagram claiming sender {sender} does not authenticate",
                            "auth") from None
        if counter > highest:
            shift = counter - highest
            bits = ((bits << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if shift < REPLAY_WINDOW \
                else 1
            self._seen[sender] = (counter, bits)
        else:
            self._seen[sender] = (highest, bits | 1 << (highest - counter))
        return header + payload
