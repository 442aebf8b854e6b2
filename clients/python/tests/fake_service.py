"""A fake Stoker service for the client tests: speaks the local trainer protocol v5 and writes STKB
batches exactly as docs/protocol.md describes (written independently of the client's parser)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import numpy as np

CODES = {np.dtype("<f4"): 1, np.dtype("<i8"): 2, np.dtype("<i4"): 3, np.dtype("u1"): 4}

HELLO, NEXT, BYE, RELEASE = 1, 2, 3, 4
WELCOME, BATCH, END, ERROR, REF = 11, 12, 13, 14, 15


def align64(n: int) -> int:
    return (n + 63) // 64 * 64


#: the tensors a batch carries as its metadata (descriptor flag bit 0), not as model inputs
METADATA = ("sample_index", "pixel_norm", "pixel_patch", "video_frame_counts")
#: the vision inputs a batch without any image (image_grid_thw of 0 rows) flags as metadata too
VISION = ("pixel_values", "pixel_values_u8", "image_grid_thw")


def metadata_of(tensors: dict, metadata=METADATA) -> tuple:
    """The names ``write_batch`` flags in ``tensors``: ``metadata``, and the vision inputs of a batch without images."""
    grid = tensors.get("image_grid_thw")
    empty = grid is not None and np.asarray(grid).shape[0] == 0
    return tuple(metadata) + (VISION if empty else ())


def write_batch(tensors: dict, *, epoch=0, step=0, rank=0, world=1, samples=None, scheduled=None,
                global_step=None, resume=None, metadata=METADATA, version=2) -> bytes:
    """The STKB bytes of a batch holding ``tensors`` (name -> array), in the given order, those named in
    ``metadata`` flagged as the batch's metadata (and, as the service does, its vision inputs when
    ``image_grid_thw`` has no row); with ``resume`` ({"epoch", "position", "next_step",
    "sources": [(epoch, position), ...]}) its resume block after the table. ``version`` 1 writes the
    old layout (no flags)."""
    n = len(tensors)
    metadata = metadata_of(tensors, metadata)
    header = align64(64 + 128 * n + (1056 if resume is not None else 0))
    offsets, off = [], header
    for a in tensors.values():
        offsets.append(off)
        off = align64(off + a.nbytes)
    total = off
    buf = bytearray(total)
    first = next(iter(tensors.values())) if tensors else None
    b = samples if samples is not None else (first.shape[0] if first is not None and first.ndim else 0)
    struct.pack_into("<4sIIIQQQIIIIQ", buf, 0, b"STKB", version, n, header, total, epoch, step, rank, world,
                     b, scheduled if scheduled is not None else b,
                     global_step if global_step is not None else step)
    for i, ((name, a), o) in enumerate(zip(tensors.items(), offsets)):
        a = np.array(a, order="C", copy=False)  # (ascontiguousarray would make 0-d arrays 1-d)
        shape = list(a.shape) + [0] * (6 - a.ndim)
        flags = 1 if version >= 2 and name in metadata else 0
        struct.pack_into("<32sII6QQQI20x", buf, 64 + 128 * i, name.encode("ascii"), CODES[a.dtype], a.ndim,
                         *shape, o, a.nbytes, flags)
        buf[o:o + a.nbytes] = a.tobytes()
    if resume is not None:
        at = 64 + 128 * n
        struct.pack_into("<4sIQQQ", buf, at, b"STKR", len(resume["sources"]), resume["epoch"], resume["position"],
                         resume["next_step"])
        for i, (e, p) in enumerate(resume["sources"]):
            struct.pack_into("<QQ", buf, at + 32 + 16 * i, e, p)
    return bytes(buf)


def make_batches(count: int, *, batch=2, length=8, pixels=(4, 1176), seed=0):
    """Qwen-VL-like batches (dicts of arrays), deterministic."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        ids = rng.integers(0, 150000, size=(batch, length), dtype=np.int64)
        out.append({
            "input_ids": ids,
            "labels": np.where(rng.random((batch, length)) < 0.5, -100, ids).astype(np.int64),
            "attention_mask": np.ones((batch, length), dtype=np.int64),
            "position_ids": np.broadcast_to(np.arange(length, dtype=np.int64), (3, batch, length)).copy(),
            "pixel_values": rng.standard_normal(pixels).astype(np.float32),
            "image_grid_thw": np.array([[1, 2, 2]], dtype=np.int64),
            "sample_index": np.arange(i * batch, (i + 1) * batch, dtype=np.int64),
            "pad": np.arange(5, dtype=np.int32),
            "raw": np.full((3,), i, dtype=np.uint8),
        })
    return out


class FakeService:
    """Serves ``batches`` to every connection, each rank's feed continuing where it stands.

    delivery: "copy" (BATCH frames) or "shm" (batches written into segment files under ``shm_dir``
    and referenced with REF frames, when the HELLO accepts shared memory).
    """

    def __init__(self, tmpdir, batches, *, delivery="copy", version=5, fingerprint=0xF00D,
                 steps_per_epoch=None, expected_batch_bytes=0, hello_error=None, welcome_version=None,
                 segment_for=None, segment_bytes=1 << 18, corrupt=None, error_after=None,
                 drop_after=None, stall_after=None, trickle_after=None, features=1):
        self.tmpdir = str(tmpdir)
        self.path = os.path.join(self.tmpdir, "feed.sock")
        self.shm_dir = os.path.join(self.tmpdir, "shm")
        os.makedirs(self.shm_dir, exist_ok=True)
        self.batches = batches
        self.delivery = delivery
        self.version = version
        self.fingerprint = fingerprint
        self.steps_per_epoch = steps_per_epoch or max(len(batches), 1)
        self.expected_batch_bytes = expected_batch_bytes
        self.hello_error = hello_error
        self.welcome_version = welcome_version or version
        self.segment_for = segment_for or (lambda i: (f"seg-{i // 4}", (i % 4) * 65536))
        self.segment_bytes = segment_bytes
        self.corrupt = corrupt  # fn(step, bytes) -> bytes applied to the STKB bytes/REF header sent
        self.error_after = error_after  # (n, message): ERROR instead of batch n
        self.drop_after = drop_after  # close the socket instead of answering batch n
        self.stall_after = stall_after  # (n, seconds): a wedged pipeline, batch n answered only after that long
        self.trickle_after = trickle_after  # (n, pause): batch n sent 64 bytes at a time, a pause between (a slow peer)
        self.features = features  # the WELCOME's features (bit 0: takes headspace reports); None: a 72-byte WELCOME of before
        self.events = []  # (connection number, kind, detail)
        self.hellos = []
        self.positions = {}  # rank -> next step
        self.held = {}  # lease -> (connection, step)
        self.released = []  # lease ids released by RELEASE, in order
        self.violations = []
        self.timings = []  # (rank, wait_ns, step_ns) from NEXT payloads, in order
        self.headspace = []  # (rank, floor_ns, floor_steps) from 32-byte NEXT payloads, in order
        self.leases = {}  # step -> lease
        self._next_lease = 1000
        self._done = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(8)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ lifecycle

    def close(self):
        self._closed = True
        try:
            self._server.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_done(self, connections=1, timeout=5.0):
        """Waits until ``connections`` connections have ended (BYE or EOF)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self._done) >= connections:
                return True
            time.sleep(0.005)
        return False

    def wait_for(self, predicate, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.005)
        return False

    def kinds(self, conn=None):
        return [e[1] for e in self.events if conn is None or e[0] == conn]

    # ------------------------------------------------------------------ serving

    def _accept(self):
        n = 0
        while not self._closed:
            try:
                s, _ = self._server.accept()
            except OSError:
                return
            n += 1
            threading.Thread(target=self._serve, args=(s, n), daemon=True).start()

    @staticmethod
    def _read_exact(s, n):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = s.recv_into(view[got:])
            if k == 0:
                raise EOFError
            got += k
        return bytes(buf)

    def _read_frame(self, s):
        t, n = struct.unpack("<IQ", self._read_exact(s, 12))
        return t, self._read_exact(s, n) if n else b""

    @staticmethod
    def _send(s, t, payload=b""):
        s.sendall(struct.pack("<IQ", t, len(payload)) + payload)

    def _error(self, s, c, message):
        self.events.append((c, "ERROR", message))
        self._send(s, ERROR, message.encode("utf-8"))

    def _serve(self, s, c):
        try:
            with s:
                t, p = self._read_frame(s)
                if t != HELLO:
                    self._error(s, c, f"expected HELLO, got frame type {t}")
                    return
                version = struct.unpack_from("<I", p)[0]
                if version != self.version:
                    self._error(s, c, f"protocol version {version} is not supported; "
                                      f"this service speaks version {self.version}")
                    return
                _, rank, world, flags, r_epoch, r_position, fp, label = struct.unpack_from("<IIIIQQQQ", p)
                # the fake's schedule: one sample per global step, an epoch of steps_per_epoch samples
                resume = r_epoch * self.steps_per_epoch + r_position
                hello = dict(version=version, rank=rank, world=world, flags=flags, resume_step=resume,
                             epoch=r_epoch, position=r_position, fingerprint=fp, job=p[48:].decode("utf-8"),
                             label=label if flags & 4 else None)
                self.hellos.append(hello)
                self.events.append((c, "HELLO", hello))
                if self.hello_error:
                    self._error(s, c, self.hello_error)
                    return
                if rank >= world:
                    self._error(s, c, f"rank {rank} is outside the world of {world} ranks")
                    return
                if flags & 2:
                    if fp not in (0, self.fingerprint):
                        self._error(s, c, f"fingerprint {fp:#x} does not match this job's {self.fingerprint:#x}")
                        return
                    self.positions[rank] = resume
                pos = self.positions.setdefault(rank, 0)
                shm = self.delivery == "shm" and bool(flags & 1)
                spe = self.steps_per_epoch
                welcome = struct.pack("<IIQQQQQQQQ", self.welcome_version, 1 if shm else 0,
                                      self.expected_batch_bytes, pos, self.fingerprint, spe, pos // spe, pos % spe, spe, 1)
                if self.features is not None:
                    welcome += struct.pack("<Q", self.features)
                self._send(s, WELCOME, welcome)
                while True:
                    try:
                        t, p = self._read_frame(s)
                    except EOFError:
                        self.events.append((c, "EOF", None))
                        return
                    if t == BYE:
                        self.events.append((c, "BYE", None))
                        return
                    if t == RELEASE:
                        if not p or len(p) % 8:
                            self.violations.append(f"RELEASE payload of {len(p)} bytes")
                        ids = list(struct.unpack(f"<{len(p) // 8}Q", p))
                        self.events.append((c, "RELEASE", ids))
                        for lease in ids:
                            owner = self.held.pop(lease, None)
                            if owner is None or owner[0] != c:
                                self.violations.append(f"RELEASE of lease {lease} not held by connection {c}")
                            self.released.append(lease)
                        continue
                    if t != NEXT:
                        self.violations.append(f"unexpected frame type {t}")
                        self._error(s, c, f"unexpected frame type {t}")
                        return
                    # as the service: 0, the trainer's timing of its step before, or that and its compute floor when the
                    # WELCOME offered to take it
                    allowed = (0, 16, 32) if self.features is not None and self.features & 1 else (0, 16)
                    if len(p) not in allowed:
                        self.violations.append(f"NEXT payload of {len(p)} bytes")
                        self._error(s, c, f"NEXT payload of {len(p)} bytes; protocol version 5 sends "
                                          + ", ".join(map(str, allowed)))
                        return
                    if p:
                        wait_ns, step_ns = struct.unpack_from("<QQ", p)
                        self.timings.append((rank, wait_ns, step_ns))
                    if len(p) == 32:
                        floor_ns, floor_steps = struct.unpack_from("<QQ", p, 16)
                        if floor_steps < 1:
                            self.violations.append("a headspace report of no step")
                        self.headspace.append((rank, floor_ns, floor_steps))
                    step = self.positions[rank]
                    self.events.append((c, "NEXT", step))
                    if self.drop_after is not None and step >= self.drop_after:
                        s.shutdown(socket.SHUT_RDWR)
                        return
                    if self.stall_after is not None and step >= self.stall_after[0]:
                        time.sleep(self.stall_after[1])
                    if self.error_after is not None and step >= self.error_after[0]:
                        self._error(s, c, self.error_after[1])
                        return
                    if step >= len(self.batches):
                        self._send(s, END)
                        continue
                    self.positions[rank] = step + 1
                    data = write_batch(self.batches[step], epoch=step // self.steps_per_epoch,
                                       step=step % self.steps_per_epoch, rank=rank, world=world,
                                       global_step=step)
                    if shm:
                        self._send_ref(s, c, step, data)
                    else:
                        if self.corrupt:
                            data = self.corrupt(step, data)
                        if self.trickle_after is not None and step >= self.trickle_after[0]:
                            frame = struct.pack("<IQ", BATCH, len(data)) + data
                            for i in range(0, len(frame), 64):
                                s.sendall(frame[i:i + 64])
                                time.sleep(self.trickle_after[1])
                            continue
                        self._send(s, BATCH, data)
        except (EOFError, OSError):
            self.events.append((c, "EOF", None))
        finally:
            # every lease the connection still holds is released on disconnect
            for lease, (conn, _) in list(self.held.items()):
                if conn == c:
                    del self.held[lease]
            self._done.append(c)

    def _send_ref(self, s, c, step, data):
        name, offset = self.segment_for(step)
        path = os.path.join(self.shm_dir, name)
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.truncate(self.segment_bytes)
            os.chmod(path, 0o600)
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        header_bytes = struct.unpack_from("<I", data, 12)[0]
        header = data[:header_bytes]
        if self.corrupt:
            header = self.corrupt(step, header)
        lease = self._next_lease
        self._next_lease += 1
        self.held[lease] = (c, step)
        self.leases[step] = lease
        p = path.encode("utf-8")
        self.events.append((c, "REF", lease))
        self._send(s, REF, struct.pack("<QQQI", lease, offset, len(data), len(p)) + p + header)
