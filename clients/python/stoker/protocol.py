"""The local trainer protocol, version 5 (docs/protocol.md, section 2): frame types and payloads."""

from __future__ import annotations

import struct
from typing import NamedTuple

from .errors import ProtocolError

VERSION = 5

HELLO, NEXT, BYE, RELEASE = 1, 2, 3, 4
WELCOME, BATCH, END, ERROR, REF = 11, 12, 13, 14, 15
FRAME_NAMES = {HELLO: "HELLO", NEXT: "NEXT", BYE: "BYE", RELEASE: "RELEASE", WELCOME: "WELCOME",
               BATCH: "BATCH", END: "END", ERROR: "ERROR", REF: "REF"}

FLAG_SHARED_MEMORY = 1
FLAG_RESUME = 2
FLAG_RESUME_STEP = 4  # resume_step, the saved state's next_step, is valid

DELIVERY_COPY = 0
DELIVERY_SHARED_MEMORY = 1

#: WELCOME ``features`` bit: the service takes a NEXT of 32 bytes, a timing with the trainer's compute floor (headspace)
FEATURE_HEADSPACE = 1

FRAME = struct.Struct("<IQ")  # type, payload length
_HELLO = struct.Struct("<IIIIQQQQ")
_WELCOME = struct.Struct("<IIQQQQQQQQ")  # what every version-5 service sends; newer ones append features u64
_FEATURES = struct.Struct("<Q")
_REF = struct.Struct("<QQQI")
_TIMING = struct.Struct("<QQ")  # NEXT's optional payload: wait_ns, step_ns of the step before
_TIMING_HEADSPACE = struct.Struct("<QQQQ")  # the same, then floor_ns, floor_steps (FEATURE_HEADSPACE)
_MAX_NS = (1 << 63) - 1  # the service refuses more: not a measurement

# The Java service reads trainer frames other than BATCH of at most 1 MiB (FeedProtocol.FrameReader.small):
# a RELEASE frame carries at most this many leases.
MAX_RELEASES_PER_FRAME = (1 << 20) // 8


class Welcome(NamedTuple):
    version: int
    delivery: int
    expected_batch_bytes: int
    next_step: int
    fingerprint: int
    steps_per_epoch: int
    epoch: int
    position: int
    dataset_size: int
    positions_per_step: int
    features: int = 0  # 0 from a service from before the field (a 72-byte WELCOME)

    @property
    def takes_headspace(self) -> bool:
        """Whether the service takes the trainer's compute floor with a NEXT (``FEATURE_HEADSPACE``)."""
        return bool(self.features & FEATURE_HEADSPACE)

    def advance(self, epoch: int, position: int, steps: int):
        """The cursor ``steps`` batches after (epoch, position), by the schedule's rule: each global
        step takes ``positions_per_step`` samples of the epoch's order, and an epoch ends when less
        than one step is left (drop_last). Arithmetic, not a walk (audit #28: ``state_dict()`` after
        10^7 batches walked 10^7 steps): the same result as taking one step at a time."""
        pps, n = self.positions_per_step, self.dataset_size
        if pps <= 0 or n <= 0 or steps <= 0:
            return epoch, position
        # steps until this epoch ends: the first k >= 1 with position + k*pps + pps > n
        left = n - pps - position
        to_end = 1 if left < 0 else left // pps + 1
        if steps < to_end:
            return epoch, position + steps * pps
        # from the next epoch's start an epoch is max(1, n // pps) steps (one when a step is larger than it)
        rest, per_epoch = steps - to_end, max(1, n // pps)
        return epoch + 1 + rest // per_epoch, (rest % per_epoch) * pps

class Ref(NamedTuple):
    lease: int
    offset: int
    length: int
    path: str
    header: memoryview


def frame(type_: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(type_, len(payload)) + payload


def hello(rank: int, world: int, flags: int, resume_epoch: int, resume_position: int, fingerprint: int, job: str,
          version: int = VERSION, resume_step: int = 0) -> bytes:
    return frame(HELLO, _HELLO.pack(version, rank, world, flags, resume_epoch, resume_position, fingerprint, resume_step)
                 + job.encode("utf-8"))


def next_request(timing=None, headspace=None) -> bytes:
    """A NEXT frame: empty, or carrying ``timing`` = (wait_ns, step_ns), the trainer's measurement of the
    batch it received before (time blocked in the call that returned it; time from that return to now),
    and with it, when given, ``headspace`` = (floor_ns, floor_steps): the median compute of ``floor_steps``
    replayed steps (send it only to a service whose WELCOME has ``FEATURE_HEADSPACE``)."""
    if timing is None:
        if headspace is not None:
            raise ValueError("a headspace report goes with a timing")
        return frame(NEXT)
    wait_ns, step_ns = (min(max(int(v), 0), _MAX_NS) for v in timing)
    if headspace is None:
        return frame(NEXT, _TIMING.pack(wait_ns, step_ns))
    floor_ns, floor_steps = (min(max(int(v), 0), _MAX_NS) for v in headspace)
    if floor_steps < 1:
        raise ValueError(f"a headspace report of {floor_steps} steps")
    return frame(NEXT, _TIMING_HEADSPACE.pack(wait_ns, step_ns, floor_ns, floor_steps))


def release(leases) -> bytes:
    """RELEASE frames (one per MAX_RELEASES_PER_FRAME leases) for ``leases``."""
    out = []
    for i in range(0, len(leases), MAX_RELEASES_PER_FRAME):
        chunk = leases[i:i + MAX_RELEASES_PER_FRAME]
        out.append(frame(RELEASE, struct.pack(f"<{len(chunk)}Q", *chunk)))
    return b"".join(out)


def decode_welcome(p) -> Welcome:
    if len(p) < _WELCOME.size:
        raise ProtocolError(f"WELCOME of {len(p)} bytes; version {VERSION} sends at least {_WELCOME.size}")
    features = _FEATURES.unpack_from(p, _WELCOME.size)[0] if len(p) >= _WELCOME.size + _FEATURES.size else 0
    return Welcome(*_WELCOME.unpack_from(p, 0), features)


def decode_ref(p) -> Ref:
    if len(p) < _REF.size:
        raise ProtocolError(f"REF of {len(p)} bytes; it needs at least {_REF.size}")
    lease, offset, length, path_len = _REF.unpack_from(p, 0)
    end = _REF.size + path_len
    if end > len(p):
        raise ProtocolError(f"REF path of {path_len} bytes overruns the {len(p)}-byte payload")
    try:
        path = bytes(p[_REF.size:end]).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"REF path {bytes(p[_REF.size:end])!r} is not UTF-8") from None
    return Ref(lease, offset, length, path, memoryview(p)[end:])


def decode_text(p) -> str:
    return bytes(p).decode("utf-8", errors="replace")
