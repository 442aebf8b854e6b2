"""Loader: one trainer rank's connection to a Stoker service on the same node."""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os
import socket
import stat
import time
import warnings
import weakref
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import pixels
from . import protocol as P
from .errors import ProtocolError, StokerError
from .layout import BatchMeta, build_views, inputs, parse_header, with_metadata

#: A mapping not referenced in this many REFs is dropped (docs/protocol.md, REF).
MAPPING_IDLE_REFS = 64
#: Largest non-BATCH frame accepted from the service (REF, WELCOME, ERROR are small).
MAX_SMALL_FRAME = 64 << 20
#: Largest BATCH frame accepted (1 TiB): a length beyond any batch is a broken stream, not an allocation to try.
MAX_BATCH_FRAME = 1 << 40
#: Steps whose (wait_ns, step_ns) a Loader keeps for ``timings()`` unless told otherwise.
KEEP_TIMINGS = 10_000
#: The most batches ``headspace`` keeps copies of (each is a whole batch in memory).
MAX_HEADSPACE_BATCHES = 1024
#: Seconds a plain ``Loader`` keeps trying to connect while the socket is missing or refuses (the service starting).
CONNECT_TIMEOUT = 10.0
#: Seconds ``Loader.from_env`` keeps trying, unless STOKER_CONNECT_TIMEOUT says otherwise: a job's trainers
#: may start before its service is up.
ENV_CONNECT_TIMEOUT = 120.0
#: Seconds each request may take end to end unless ``timeout`` says otherwise (the HELLO until its WELCOME,
#: each ``next()`` until its batch has arrived): a wedged service fails the trainer with an error that says
#: so, not a silent hang until the collectives time out. NCCL's own default is 10 minutes.
DEFAULT_TIMEOUT = 600.0
#: Free copy-delivery buffers kept for reuse.
_POOL_KEEP = 4
_POOL_ROUND = 1 << 20


def default_address(job: str = "default") -> str:
    """The service's default socket: ``$XDG_RUNTIME_DIR/stoker/<job>.sock``, or
    ``/tmp/stoker-<uid>/<job>.sock`` when XDG_RUNTIME_DIR is unset (as ``stoker serve`` picks it)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(xdg, "stoker") if xdg else f"/tmp/stoker-{os.getuid()}"
    return os.path.join(base, f"{job}.sock")


def _refused(what: str, path: str, cause: str) -> StokerError:
    hint = ("; serve the job from a folder of your own, mode 0700 (stoker serve --socket, or set XDG_RUNTIME_DIR)"
            if what.startswith("socket") else "")
    return StokerError(f"refusing the Stoker {what} {path}: {cause}{hint}")


def _who_may_write(mode: int) -> str:
    g, o = bool(mode & stat.S_IWGRP), bool(mode & stat.S_IWOTH)
    return "its group and others" if g and o else "its group" if g else "others"


def check_socket(path: str) -> None:
    """Refuses (StokerError naming the path and the cause) a service socket this user cannot trust
    (audit #19): its folder must be a real folder (not a link) owned by this user and writable by no
    group or other, and the socket, once there, this user's. Under ``/tmp`` (XDG_RUNTIME_DIR unset) the
    default folder's name is predictable: another user who makes it first, or who may write into the
    folder, could put their own service there and feed the trainer. ``stoker serve`` holds its default
    folder to the same rule; a client holds every socket to it, since it cannot tell a default from a
    given one. A folder that does not exist yet is left to connecting (which retries)."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    me = os.getuid()
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refused("socket folder", folder, f"it is a symbolic link (to {os.readlink(folder)})")
    if not stat.S_ISDIR(st.st_mode):
        raise _refused("socket folder", folder, "it is not a folder")
    if st.st_uid != me:
        raise _refused("socket folder", folder, f"it belongs to uid {st.st_uid}, not to this user (uid {me})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refused("socket folder", folder, f"it is writable by {_who_may_write(st.st_mode)} (mode "
                       f"{stat.filemode(st.st_mode)[1:]}), who could put their own service in its place")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refused("socket", path, "it is a symbolic link")
    if st.st_uid != me:
        raise _refused("socket", path, f"it belongs to uid {st.st_uid}, not to this user (uid {me})")


def check_segment(path: str, st: os.stat_result) -> None:
    """Refuses a shared-memory file the service named (``st``: its ``lstat``) unless it is a regular
    file, not a link, of this user (who runs the service), writable by no group or other (audit #19)."""
    if stat.S_ISLNK(st.st_mode):
        raise _refused("shared-memory segment", path, f"it is a symbolic link (to {os.readlink(path)}), "
                       f"not the service's own file")
    if not stat.S_ISREG(st.st_mode):
        raise _refused("shared-memory segment", path, "it is not a regular file")
    if st.st_uid != os.getuid():
        raise _refused("shared-memory segment", path, f"it belongs to uid {st.st_uid}, not to this user "
                       f"(uid {os.getuid()}) who runs the service")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refused("shared-memory segment", path, f"it is writable by {_who_may_write(st.st_mode)} "
                       f"(mode {stat.filemode(st.st_mode)[1:]})")


def check_state(state: dict, job: str) -> Tuple[int, int, int]:
    """Checks a ``state_dict()`` before it is loaded for ``job``; returns (epoch, position, fingerprint).
    ValueError for another job, a malformed state, or a fingerprint of 0 with a cursor other than
    the start (a state without the job's fingerprint cannot be checked against the service)."""
    if not isinstance(state, dict):
        raise ValueError(f"not a Loader state: {type(state).__name__}, expected a dict")
    missing = {"job", "epoch", "position", "fingerprint"} - set(state)
    if missing:
        raise ValueError(f"not a Loader state (protocol {P.VERSION}): missing {sorted(missing)}")
    if state["job"] != job:
        raise ValueError(f"state of job {state['job']!r} cannot resume job {job!r}")
    epoch, position, fp = state["epoch"], state["position"], state["fingerprint"]
    for label, v in (("epoch", epoch), ("position", position), ("fingerprint", fp)):
        if not (isinstance(v, int) and 0 <= v < 1 << 63 or label == "fingerprint" and isinstance(v, int) and 0 <= v < 1 << 64):
            raise ValueError(f"bad {label} {v!r} in the state")
    if fp == 0 and (epoch, position) != (0, 0):
        raise ValueError(f"the state's cursor is epoch {epoch}, position {position}, but its fingerprint is 0: a state "
                         f"without the job's fingerprint cannot be checked against the service's data set and "
                         f"configuration, so it is refused. Save state_dict() from a loader that has connected "
                         f"(with TorchIterableDataset: in the main process, DataLoader(num_workers=0))")
    return epoch, position, fp


class _Mapping:
    __slots__ = ("mm", "path", "ident", "size", "address", "last_ref")

    def __init__(self, path: str, ident, size: int, mm: mmap.mmap, last_ref: int):
        self.path, self.ident, self.size, self.mm, self.last_ref = path, ident, size, mm, last_ref
        probe = np.frombuffer(mm, dtype=np.uint8)  # a temporary export, released with `probe`
        self.address = probe.__array_interface__["data"][0]
        del probe


class _BufferPool:
    """Copy-delivery receive buffers, 64-byte aligned, recycled when no array views them any more.

    Fresh pages cost a page fault on first touch (the service measured ~75 MB/s for that on some
    machines), so buffers are kept and reused instead of allocated per batch. Thread-safe through
    deque's atomic append/popleft: ``give`` runs from weakref finalizers, on any thread.
    """

    def __init__(self):
        self._free = collections.deque()

    @staticmethod
    def allocate(n: int, touch: bool = False) -> np.ndarray:
        cap = -(-max(n, 1) // _POOL_ROUND) * _POOL_ROUND
        raw = np.empty(cap + 64, dtype=np.uint8)
        if touch:
            raw[::4096] = 0  # fault every page in now, not on the first step
        return raw

    def take(self, n: int) -> np.ndarray:
        while True:
            try:
                raw = self._free.popleft()
            except IndexError:
                return self.allocate(n)
            if raw.nbytes - 64 >= n:
                return raw
            # too small for the batches we get now: let it go

    def give(self, raw: np.ndarray) -> None:
        if len(self._free) < _POOL_KEEP:
            self._free.append(raw)

    def clear(self) -> None:
        self._free.clear()


class _Connection(NamedTuple):
    sock: socket.socket
    welcome: P.Welcome
    pending: collections.deque  # lease ids whose batches nobody views any more (filled by finalizers)


class Loader:
    """Iterates over one rank's batches from a Stoker service over its Unix socket.

    ``Loader(address, rank, world_size, *, job="default", as_torch=False, pin_memory=False,
    copy=False, timeout=600, shared_memory=True, connect_timeout=10, keep_timings=10000, local_rank=0,
    headspace=None)``;
    :meth:`from_env` takes them from a launcher's environment (torchrun's RANK, WORLD_SIZE, LOCAL_RANK).

    * ``address``: the service's socket path (str or Path); None means :func:`default_address`.
    * Iterating yields one ``{name: array}`` dict per batch holding the model inputs, in the batch's
      tensor-table order, and nothing else: ``model(**batch)`` takes it as it is (``mm_token_type_ids``
      included when the service was started for transformers 5.3 or later; no ``pixel_values`` nor
      ``image_grid_thw`` when the batch has no image: they are then in ``last_meta.metadata``). The batch's metadata
      (a :class:`BatchMeta`) is in ``loader.last_meta``: the header's fields and the batch's metadata
      tensors as NumPy arrays of its own (``last_meta.sample_index``: each sample's data set index;
      in the compact format ``last_meta.pixel_norm`` and ``last_meta.pixel_patch``).
      END from the service ends the iteration; ERROR raises :class:`StokerError` with its message.
    * The connection opens on the first ``next()`` (or :meth:`connect`), so :meth:`load_state_dict`
      can come first.
    * Shared-memory delivery (the service's choice when ``shared_memory`` is on and it supports it):
      arrays are read-only views of the mapped segment, no byte copied. The lease of a batch is
      released once no array or tensor views it any more: the RELEASE goes with the next request or
      at :meth:`close`. After :meth:`close` the service may reuse the memory, so keep nothing
      past it (or use ``copy=True``). Writing into such a tensor crashes (the mapping is read-only):
      ``clone()`` first, or ``copy=True``.
    * ``as_torch``: values are ``torch.from_numpy`` tensors (zero-copy).
    * ``pin_memory`` (needs ``as_torch``): tensors are copied into pinned memory and the lease is
      released at once. Without CUDA, it warns once and returns unpinned tensors.
    * ``copy``: owned copies, lease released at once (copy delivery already gives private memory,
      so there it changes nothing).
    * ``timeout``: the deadline of each request, end to end, in seconds (600 by default): the HELLO
      until the service's WELCOME (connecting has ``connect_timeout``), and each ``next()`` from its request until the whole batch
      has arrived (not per socket read: a service that trickles bytes cannot stretch it). Past it,
      :class:`StokerError` says ``timed out after T s waiting for the Stoker service`` and the
      connection is dropped (``load_state_dict(loader.state_dict())`` resumes on a new one). None waits
      forever. The first ``next()`` waits for the service's cold start, and every one for a batch a
      slow pipeline makes: keep it above the longest step the service may need.
    * ``connect_timeout``: seconds to keep retrying while the socket does not exist or nobody listens on
      it (a service still starting, or restarting), 10 by default; then :class:`StokerError` names the
      deadline, the socket and the last cause. 0 tries once. Other errors (permissions) fail at once.
    * ``keep_timings``: how many steps' (wait_ns, step_ns) :meth:`timings` keeps (the oldest go first).
    * ``local_rank``: the rank on this node (torchrun's LOCAL_RANK), kept as ``loader.local_rank``
      for the trainer's own use (e.g. ``pixel_device=f"cuda:{loader.local_rank}"``); not sent.
    * ``to_pixel_values``: a batch in the compact wire format (``pixel_values_u8``, from a service
      started with ``--pixel-format uint8``) is yielded with ``pixel_values`` instead, computed by
      :func:`stoker.pixels.to_pixel_values` (torch, with ``as_torch``) or its NumPy twin, bit for bit
      what the float32 format sends, with the normalization and patch sizes of ``last_meta``;
      ``pixel_device`` (needs ``as_torch``): where to do it, e.g.
      ``"cuda"`` (the u8 bytes go to the GPU, 1/8 of the float32 bytes). The u8 batch's lease is
      released once converted. A batch with videos gets ``pixel_values_videos`` from its ``pixel_values_videos_u8``
      the same way (:func:`stoker.pixels.to_pixel_values_videos`, with ``video_frame_counts`` from ``last_meta``).
      Batches without either (a batch without images has no ``pixel_values_u8``) pass unchanged.

    * ``headspace``: ``(cache_batches, replay_steps)`` measures the trainer's compute floor (SPDL's headspace
      analysis, its ``CacheDataLoader``): the first ``cache_batches`` batches from the service are handed out as
      usual and a private copy of each is kept (the copy's time is part of those steps' wait, and in
      ``headspace_copy_ns``); the next ``replay_steps`` calls hand out those copies again, round robin, without
      asking the service (do not write into them: the next round gets the same arrays); then the copies are
      dropped and batches come from the service again, where the feed stands. The compute of each replayed step is
      timed as every step is (``replay_steps_ns``); its median is the compute floor (``compute_floor_ns``), the
      step the trainer would take with no wait for data. It goes to the service with the next request
      (docs/protocol.md, NEXT), whose verdict then says how much per step the data side can win at most; a
      service from before the report only warns. Replayed steps are not in :meth:`timings` nor the wait ratio,
      and move no cursor (``state_dict()`` stays at the last batch from the service; ``last_meta`` is the
      replayed batch's). :meth:`headspace_figures` gives the figures on the trainer's side. At most
      ``MAX_HEADSPACE_BATCHES`` batches are kept; each costs its size in memory while kept (and on the GPU
      with ``pixel_device="cuda"``).

    Wait measurement (what the service's wait ratio is made of): each ``next()`` that returns a batch
    is timed (``time.perf_counter_ns``): ``wait_ns``, the time it blocked (connecting, the request,
    receiving, a compact batch's conversion), and ``step_ns``, the time from its return to the next
    ``next()`` (the trainer's compute). The pair goes to the service with the next request (NEXT's
    payload, docs/protocol.md) and into ``loader.waits`` (a deque of the last ``keep_timings`` pairs;
    :meth:`timings`, :meth:`wait_ratio`). The last batch's pair is sent when the loop asks once more (and
    gets END); a loop that stops early leaves it unsent.

    Counters: ``batches``; ``bytes_received`` (payload bytes of BATCH frames); ``bytes_copied``
    (bytes the client copied in user space to produce the arrays: 0 unless ``copy`` or
    ``pin_memory``; BATCH payloads are received straight into the arrays' buffer); ``refs``.

    Not thread-safe: use a Loader from one thread at a time.
    """

    def __init__(self, address=None, rank: int = 0, world_size: int = 1, *, job: str = "default",
                 as_torch: bool = False, pin_memory: bool = False, copy: bool = False,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, shared_memory: bool = True, to_pixel_values: bool = False,
                 pixel_device=None, connect_timeout: Optional[float] = CONNECT_TIMEOUT, keep_timings: int = KEEP_TIMINGS,
                 local_rank: int = 0, headspace: Optional[Tuple[int, int]] = None):
        for label, v in (("rank", rank), ("world_size", world_size)):
            if not isinstance(v, int) or not 0 <= v < 1 << 32:
                raise ValueError(f"{label} must be an int in [0, 2**32), got {v!r}")
        if pin_memory and not as_torch:
            raise ValueError("pin_memory=True needs as_torch=True")
        if pixel_device is not None and not (as_torch and to_pixel_values):
            raise ValueError("pixel_device needs as_torch=True and to_pixel_values=True")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        if connect_timeout is not None and not connect_timeout >= 0:
            raise ValueError(f"connect_timeout must be >= 0 seconds, got {connect_timeout!r}")
        if not isinstance(keep_timings, int) or keep_timings < 0:
            raise ValueError(f"keep_timings must be an int >= 0, got {keep_timings!r}")
        if headspace is not None:
            ok = (isinstance(headspace, (tuple, list)) and len(headspace) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in headspace))
            if not ok:
                raise ValueError(f"headspace must be (cache_batches, replay_steps), two ints >= 1, got {headspace!r}")
            if headspace[0] > MAX_HEADSPACE_BATCHES:
                raise ValueError(f"headspace keeps copies of at most {MAX_HEADSPACE_BATCHES} batches, got {headspace[0]}")
        self.address = os.fspath(address) if address is not None else default_address(job)
        self.rank = rank
        self.world_size = world_size
        self.job = job
        self.as_torch = as_torch
        self.copy = copy
        self.timeout = None if timeout is None else float(timeout)
        self._deadline: Optional[float] = None  # time.monotonic() by which the request under way must be answered
        self.shared_memory = shared_memory
        self.pin_memory = pin_memory
        self.to_pixel_values = to_pixel_values
        self.pixel_device = pixel_device
        self.connect_timeout = 0.0 if connect_timeout is None else float(connect_timeout)
        self.local_rank = local_rank
        #: (wait_ns, step_ns) of the last ``keep_timings`` steps, oldest first
        self.waits: collections.deque = collections.deque(maxlen=keep_timings)
        #: nanoseconds the last ``next()`` that returned a batch blocked (0 before one)
        self.last_wait_ns = 0
        self._returned_ns: Optional[int] = None  # when that next() returned, while its timing is not sent
        #: nanoseconds the last batch's pixel_values_u8 → pixel_values conversion took (0: none)
        self.last_convert_ns = 0
        if as_torch:
            import torch  # fail early when torch is missing
            self._torch = torch
            self._torch_dtypes = {np.dtype("<f4"): torch.float32, np.dtype("<i8"): torch.int64,
                                  np.dtype("<i4"): torch.int32, np.dtype("u1"): torch.uint8}
            if pin_memory and not torch.cuda.is_available():
                warnings.warn("stoker: pin_memory=True but CUDA is not available; tensors are not pinned",
                              RuntimeWarning, stacklevel=2)
                self.pin_memory = False
        self.last_meta: Optional[BatchMeta] = None
        self._cursor_meta: Optional[BatchMeta] = None  # the last batch's from the service, not a replayed copy's
        self.batches = 0
        self.bytes_received = 0
        self.bytes_copied = 0
        self.refs = 0
        self._conn: Optional[_Connection] = None
        self._welcome: Optional[P.Welcome] = None  # of the current or last connection
        self._yielded = 0  # batches yielded since that WELCOME
        self._resume: Optional[Tuple[int, int, int]] = None  # (epoch, position, fingerprint) for the next HELLO
        self._resume_step: Optional[int] = None  # the loaded state's next_step, if it had one
        self._state = "new"  # new | open | ended | failed | closed
        self._maps: Dict[str, _Mapping] = {}
        self._pool = _BufferPool()
        self._pixel_pool = _BufferPool()  # CPU pixel_values of converted compact batches
        self._header = bytearray(P.FRAME.size)
        # headspace: "off" | "caching" (copying the first batches) | "replaying" | "done"
        self.headspace = None if headspace is None else (int(headspace[0]), int(headspace[1]))
        self._hs_phase = "off" if headspace is None else "caching"
        self._hs_cache: List[Tuple[dict, BatchMeta]] = []
        self._hs_last_replayed = False  # the batch handed out last was a replayed copy
        self._hs_held_timing: Optional[Tuple[int, int]] = None  # the last real step's timing, sent after the replay
        self._hs_report: Optional[Tuple[int, int]] = None  # (floor_ns, steps) not sent yet
        #: step_ns of each replayed step (the trainer's compute with no wait for data)
        self.replay_steps_ns: List[int] = []
        #: batches handed out from the headspace copies (no request to the service)
        self.replayed = 0
        #: nanoseconds spent copying batches for the replay (inside those steps' wait)
        self.headspace_copy_ns = 0
        #: the median of ``replay_steps_ns`` once the replay is over, else None
        self.compute_floor_ns: Optional[int] = None
        #: whether the floor went to the service (False: not yet, or a service that does not take it)
        self.headspace_reported = False

    # ------------------------------------------------------------------ connection

    def connect(self) -> P.Welcome:
        """Connects and says HELLO (with the loaded state, if any); returns the service's WELCOME.
        Called by the first ``next()``; raises StokerError when the service refuses."""
        if self._state == "closed":
            raise StokerError("the Loader is closed")
        if self._conn is not None:
            return self._conn.welcome
        sock = self._connect_socket()  # retried within connect_timeout; the deadline starts once connected
        self._start_request()
        try:
            flags = P.FLAG_SHARED_MEMORY if self.shared_memory else 0
            epoch, position, fingerprint, step = 0, 0, 0, 0
            if self._resume is not None:
                flags |= P.FLAG_RESUME
                epoch, position, fingerprint = self._resume
                if self._resume_step is not None:  # the service labels its steps on from it, also after a resize
                    flags |= P.FLAG_RESUME_STEP
                    step = self._resume_step
            try:
                self._sendall(sock, P.hello(self.rank, self.world_size, flags, epoch, position, fingerprint, self.job,
                                            resume_step=step))
            except StokerError as failed:
                # A service over its connection cap writes its ERROR and closes before the HELLO is sent: the
                # write fails (broken pipe) with the ERROR already queued here. Quote the service, not the pipe.
                said = self._refusal(sock, failed)
                if said is None:
                    raise
                raise said from failed
            type_, n = self._read_frame_header(sock)
            if type_ == P.ERROR:
                raise _service_error(self._read_small(sock, n, type_))
            if type_ != P.WELCOME:
                raise ProtocolError(f"expected WELCOME, got {P.FRAME_NAMES.get(type_, type_)} (frame type {type_})")
            w = P.decode_welcome(self._read_small(sock, n, type_))
            if w.version != P.VERSION:
                raise ProtocolError(f"the service answered with protocol version {w.version}; "
                                    f"this client speaks version {P.VERSION}")
            if w.delivery not in (P.DELIVERY_COPY, P.DELIVERY_SHARED_MEMORY):
                raise ProtocolError(f"WELCOME with unknown delivery {w.delivery}")
            if w.delivery == P.DELIVERY_SHARED_MEMORY and not self.shared_memory:
                raise ProtocolError("the service chose shared-memory delivery, which this client did not accept")
        except BaseException:
            sock.close()
            raise
        self._resume = None
        self._conn = _Connection(sock, w, collections.deque())
        self._welcome = w
        self._yielded = 0
        self._state = "open"
        if w.delivery == P.DELIVERY_COPY and w.expected_batch_bytes > 0:
            # Allocate and touch buffers now, so the first steps do not pay page faults: two, since
            # a loop still holds batch k while batch k+1 arrives.
            for _ in range(2):
                self._pool.give(_BufferPool.allocate(w.expected_batch_bytes, touch=True))
        return w

    def _connect_socket(self) -> socket.socket:
        """A socket connected to the service, retrying while its path is missing or refuses (a service
        starting or restarting: it makes its socket only once its configuration is checked) until
        ``connect_timeout``; each attempt on a fresh socket (a failed connect leaves one unusable)."""
        deadline = time.monotonic() + self.connect_timeout
        pause = 0.05
        while True:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            except OSError as e:
                raise StokerError(f"cannot create a Unix socket: {e}") from e
            try:
                check_socket(self.address)  # each attempt: the folder may appear while we wait
                sock.settimeout(self.timeout)
                sock.connect(self.address)
                return sock
            except (FileNotFoundError, ConnectionRefusedError) as e:
                sock.close()
                left = deadline - time.monotonic()
                if left <= 0:
                    if self.connect_timeout <= 0:
                        raise StokerError(f"cannot connect to the Stoker service at {self.address}: {e}") from e
                    raise StokerError(f"cannot connect to the Stoker service at {self.address} within the "
                                      f"{self.connect_timeout:g} s connect_timeout (STOKER_CONNECT_TIMEOUT for "
                                      f"Loader.from_env); last cause: {e}. Is `stoker serve` running for this "
                                      f"job (--socket, --job)?") from e
                time.sleep(min(pause, left))
                pause = min(pause * 2, 1.0)
            except OSError as e:
                sock.close()
                raise StokerError(f"cannot connect to the Stoker service at {self.address}: {e}") from e
            except StokerError:
                sock.close()
                raise

    @classmethod
    def from_env(cls, **kwargs) -> "Loader":
        """A Loader configured from the environment a launcher sets up: ``rank`` from ``RANK``,
        ``world_size`` from ``WORLD_SIZE``, ``local_rank`` from ``LOCAL_RANK`` (torchrun's variables;
        0, 1 and 0 when unset), the socket from ``STOKER_SOCKET`` (else the job's default address), the
        job from ``STOKER_JOB`` (else ``"default"``), and ``connect_timeout`` from
        ``STOKER_CONNECT_TIMEOUT`` (seconds, else 120: trainers may start before the service is up).
        Keyword arguments override them (``address=``, ``rank=``, ``world_size=``, ``local_rank=``,
        ``job=``, ``connect_timeout=``) and the rest pass through to :class:`Loader`. A variable that
        is set but not a number raises ValueError naming it."""
        env = os.environ

        def number(name: str, default, kind):
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            try:
                return kind(raw)
            except ValueError:
                raise ValueError(f"environment variable {name}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None

        args = dict(rank=number("RANK", 0, int), world_size=number("WORLD_SIZE", 1, int),
                    local_rank=number("LOCAL_RANK", 0, int), job=env.get("STOKER_JOB") or "default",
                    connect_timeout=number("STOKER_CONNECT_TIMEOUT", ENV_CONNECT_TIMEOUT, float))
        args.update(kwargs)
        address = args.pop("address", None) or env.get("STOKER_SOCKET") or None
        rank, world_size = args.pop("rank"), args.pop("world_size")
        return cls(address, rank, world_size, **args)

    def timings(self) -> List[Tuple[int, int]]:
        """The (wait_ns, step_ns) of the last ``keep_timings`` steps, oldest first (see the class doc)."""
        return list(self.waits)

    def wait_ratio(self) -> Optional[float]:
        """Σ wait / Σ (wait + step) over :meth:`timings`, as the service computes it; None before a step."""
        wait = sum(w for w, _ in self.waits)
        total = wait + sum(s for _, s in self.waits)
        return wait / total if total else None

    @property
    def welcome(self) -> Optional[P.Welcome]:
        """The WELCOME of the current (or last) connection, None before the first."""
        return self._welcome

    @property
    def delivery(self) -> Optional[str]:
        """"copy" or "shared_memory" once connected."""
        if self._welcome is None:
            return None
        return "shared_memory" if self._welcome.delivery == P.DELIVERY_SHARED_MEMORY else "copy"

    def _disconnect(self, polite: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if polite:
                self._sendall(conn.sock, P.release(self._drain(conn.pending)) + P.frame(P.BYE))
        except (OSError, StokerError):
            pass
        finally:
            conn.sock.close()

    def close(self) -> None:
        """Sends pending RELEASEs and BYE and closes the socket. Idempotent. The service releases
        every lease this connection still holds: shared-memory arrays must not be read after this."""
        if self._state == "closed":
            return
        self._disconnect(polite=True)
        self._state = "closed"
        self._maps.clear()  # our references only: arrays still viewing a segment keep it mapped
        self._pool.clear()
        self._pixel_pool.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """``{"job", "rank", "world_size", "fingerprint", "epoch", "position", "next_step"[, "sources"]}``:
        (``epoch``, ``position``) is the cursor of the next batch this loader would yield, a place in
        the job's global sample order (``position`` samples into epoch ``epoch``'s permutation), so a
        state from any rank resumes any rank, also with another world size; ``next_step`` is a label
        (global steps from the start of the job). After a batch, all of it is what that batch's header says
        resumes the job right after it (the service's schedule, not arithmetic here), with ``sources``: each
        source's own cursor there (``{"epoch", "position"}`` in the order the sources were given), which is
        informative: the global cursor alone resumes."""
        meta = self._cursor_meta  # the last batch from the service (a replayed copy moves no cursor)
        resume = meta.resume if meta is not None and self._yielded > 0 else None
        if self._resume is not None:
            (epoch, position, fingerprint), next_step = self._resume, self._resume_step or 0
        elif self._welcome is not None and resume is not None:
            # the service's own word on where the job resumes after the last batch yielded
            state = {"job": self.job, "rank": self.rank, "world_size": self.world_size, "fingerprint": self._welcome.fingerprint,
                     "epoch": resume["epoch"], "position": resume["position"], "next_step": resume["next_step"]}
            if resume["sources"]:
                state["sources"] = [dict(s) for s in resume["sources"]]
            return state
        elif self._welcome is not None:
            w = self._welcome
            epoch, position = w.advance(w.epoch, w.position, self._yielded)
            fingerprint, next_step = w.fingerprint, w.next_step + self._yielded
        else:
            epoch, position, fingerprint, next_step = 0, 0, 0, 0
        return {"job": self.job, "rank": self.rank, "world_size": self.world_size, "fingerprint": fingerprint,
                "epoch": epoch, "position": position, "next_step": next_step}

    def load_state_dict(self, state: dict) -> None:
        """Resumes from a ``state_dict()``: the next HELLO asks for the batch at the saved cursor and
        carries the saved fingerprint (a service with another data set or configuration refuses it).
        The state may come from any rank and world size of the same job: every rank of a step saves
        the same cursor, and after a resize the epoch's order continues with no sample lost or
        repeated (which samples a rank gets then differs). Before iteration it only records the
        state; on a loader already connected (or ended, or failed) it reconnects now.

        Raises ValueError for a state of another job, a malformed one, and one whose fingerprint is
        0 while its cursor is not the job's start (epoch 0, position 0): without the fingerprint the
        service cannot check that the cursor belongs to its data set and configuration. Such a state
        is what a loader that never connected reports, e.g. a ``TorchIterableDataset`` whose loader
        lived in a DataLoader worker; loading it would resume somewhere unchecked."""
        epoch, position, fp = check_state(state, self.job)
        if self._state == "closed":
            raise StokerError("the Loader is closed")
        self._resume = (epoch, position, fp)
        step = state.get("next_step")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise ValueError(f"not a Loader state: next_step must be an integer >= 0, got {step!r}")
        self._resume_step = step
        if self._state != "new":
            self._disconnect(polite=True)
            self._state = "new"
            self.connect()

    # ------------------------------------------------------------------ iteration

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        t0 = time.perf_counter_ns()
        timing = None
        if self._returned_ns is not None:  # the step before: its wait, then the trainer's compute until now
            if self._hs_last_replayed:  # a replayed step: the compute floor's, not a step on the service's batch
                self.replay_steps_ns.append(t0 - self._returned_ns)
            else:
                timing = (self.last_wait_ns, t0 - self._returned_ns)
                self.waits.append(timing)
            self._returned_ns = None
            self._hs_last_replayed = False
        if self._state == "ended":
            raise StopIteration
        if self._state == "closed":
            raise StokerError("the Loader is closed")
        if self._state == "failed":
            raise StokerError("the connection to the service was lost; call "
                              "load_state_dict(loader.state_dict()) to reconnect and resume")
        if self._hs_phase == "replaying":
            if timing is not None:  # the last step on a real batch: reported with the first request after the replay
                self._hs_held_timing = timing
            if self.replayed < self.headspace[1]:
                return self._replay(t0)
            self._end_replay()
        if timing is None and self._hs_held_timing is not None:
            timing, self._hs_held_timing = self._hs_held_timing, None
        report = None
        if self._hs_report is not None and timing is not None:
            report, self._hs_report = self._hs_report, None
        if self._conn is None:
            self.connect()
        conn = self._conn
        if report is not None and not conn.welcome.takes_headspace:
            warnings.warn("stoker: this Stoker service does not take headspace reports (a service from before them); the "
                          f"compute floor ({report[0] / 1e6:.1f} ms) is only in loader.compute_floor_ns", RuntimeWarning,
                          stacklevel=2)
            report = None
        try:
            self._start_request()
            self._sendall(conn.sock, P.release(self._drain(conn.pending)) + P.next_request(timing, report))
            if report is not None:
                self.headspace_reported = True
            type_, n = self._read_frame_header(conn.sock)
            if type_ == P.BATCH:
                out = self._receive_batch(conn, n)
            elif type_ == P.REF and self.shared_memory:
                out = self._receive_ref(conn, n)
            elif type_ == P.END:
                if n:
                    self._read_small(conn.sock, n, type_)
                self._prune_maps(None)  # the feed is over: segments the service deleted go now
                self._state = "ended"
                raise StopIteration
            elif type_ == P.ERROR:
                raise _service_error(self._read_small(conn.sock, n, type_))
            else:
                raise ProtocolError(f"unexpected {P.FRAME_NAMES.get(type_, 'frame')} (type {type_}) after NEXT")
        except StopIteration:
            raise
        except BaseException:
            # An ERROR, a malformed frame or a broken socket: the stream cannot be trusted any more.
            self._disconnect(polite=False)
            self._state = "failed"
            raise
        self._yielded += 1
        self.batches += 1
        self._cursor_meta = self.last_meta
        self.last_convert_ns = 0
        if self.to_pixel_values and (pixels.U8 in out or pixels.VIDEO_U8 in out):
            c0 = time.perf_counter_ns()
            out = pixels.batch_to_pixel_values(out, self.last_meta, self.pixel_device,
                                               self._pixel_buffer(out) if pixels.U8 in out else None)  # drops the u8 views: their lease goes
            self.last_convert_ns = time.perf_counter_ns() - c0
        if self._hs_phase == "caching":
            out = self._keep_for_replay(out)
        self._returned_ns = time.perf_counter_ns()
        self.last_wait_ns = self._returned_ns - t0
        return out

    # ------------------------------------------------------------------ headspace (compute floor)

    def _keep_for_replay(self, out: dict) -> dict:
        """Keeps a private copy of a real batch for the replay (the service may reuse its memory once the lease goes; the
        trainer may write into what it gets); returns the batch to hand out. The copy's time is inside this step's wait."""
        c0 = time.perf_counter_ns()
        copy = {k: (v.clone() if hasattr(v, "clone") else np.array(v, copy=True)) for k, v in out.items()}
        self._hs_cache.append((copy, self.last_meta))
        if len(self._hs_cache) == self.headspace[0]:
            self._hs_phase = "replaying"
        self.headspace_copy_ns += time.perf_counter_ns() - c0
        return out

    def _replay(self, t0: int) -> dict:
        """Hands out the next kept copy (round robin) without asking the service; its step is timed as a replayed one."""
        batch, meta = self._hs_cache[self.replayed % len(self._hs_cache)]
        self.replayed += 1
        self.last_meta = meta
        self._hs_last_replayed = True
        self._returned_ns = time.perf_counter_ns()
        self.last_wait_ns = self._returned_ns - t0
        return dict(batch)

    def _end_replay(self) -> None:
        """The replay is over: the floor is the median of the replayed steps' compute; the copies go."""
        self._hs_phase = "done"
        self._hs_cache = []
        steps = sorted(self.replay_steps_ns)
        if steps:
            n = len(steps)
            self.compute_floor_ns = steps[n // 2] if n % 2 else (steps[n // 2 - 1] + steps[n // 2]) // 2
            self._hs_report = (self.compute_floor_ns, n)

    def headspace_figures(self) -> Optional[dict]:
        """The headspace measurement once the replay is over (None before): ``compute_floor_ns`` (median compute of the
        replayed steps), ``replayed_steps``, the steps on the service's batches (``steps``: those in :meth:`timings`),
        their ``mean_step_ns`` (wait + compute) and ``wait_ratio``, and ``data_headroom_ns``: what the data side can win
        at most per step, the mean step minus the floor (0 when the step is at its floor), as the service computes it
        (over its steady steps, it leaves out each rank's first 3)."""
        if self.compute_floor_ns is None:
            return None
        steps = list(self.waits)
        wait = sum(w for w, _ in steps)
        total = wait + sum(c for _, c in steps)
        mean = total / len(steps) if steps else None
        return {"compute_floor_ns": self.compute_floor_ns, "replayed_steps": len(self.replay_steps_ns), "steps": len(steps),
                "mean_step_ns": mean, "wait_ratio": wait / total if total else None,
                "data_headroom_ns": None if mean is None else max(0.0, mean - self.compute_floor_ns),
                "reported": self.headspace_reported}

    def _pixel_buffer(self, batch: dict):
        """A recycled CPU buffer for a compact batch's pixel_values (None on another device): it goes back
        to the pool when the last array or tensor viewing it dies, as copy-delivery buffers do, so that
        conversions write into pages already touched."""
        if self.pixel_device is not None and str(self.pixel_device) != "cpu":
            return None
        p, tps, _ = pixels.patch_sizes(self.last_meta)
        rows, row = pixels.output_shape(batch["image_grid_thw"], p, tps)
        n = rows * row * 4
        raw = self._pixel_pool.take(n)
        align = (-raw.__array_interface__["data"][0]) % 64
        root = np.frombuffer(memoryview(raw), dtype=np.float32, count=rows * row, offset=align)
        weakref.finalize(root, self._pixel_pool.give, raw).atexit = False
        return self._torch.from_numpy(root) if self.as_torch else root

    def _receive_batch(self, conn: _Connection, n: int) -> dict:
        # A length from a broken or hostile service must end in StokerError, not in NumPy's MemoryError or
        # ValueError (the property tests' finding: BATCH headers of 2^40 and 2^63 bytes).
        if n > MAX_BATCH_FRAME:
            raise ProtocolError(f"BATCH frame of {n} bytes is implausibly large (at most {MAX_BATCH_FRAME})")
        try:
            raw = self._pool.take(n)
        except MemoryError as e:
            raise StokerError(f"cannot allocate {n} bytes for a BATCH from the Stoker service: {e}") from e
        align = (-raw.__array_interface__["data"][0]) % 64
        # The root's base is a memoryview, so every view of it has `.base is root`: the buffer goes
        # back to the pool exactly when the last array or tensor of this batch dies.
        root = np.frombuffer(memoryview(raw), dtype=np.uint8, count=n, offset=align)
        weakref.finalize(root, self._pool.give, raw).atexit = False
        del raw
        self._recv_exact(conn.sock, memoryview(root))
        self.bytes_received += n
        meta, descs = parse_header(root, n, what="BATCH")
        self.last_meta = with_metadata(meta, root, descs)
        return self._emit(root, inputs(descs), private=True)

    def _receive_ref(self, conn: _Connection, n: int) -> dict:
        ref = P.decode_ref(self._read_small(conn.sock, n, P.REF))
        self.refs += 1
        meta, descs = parse_header(ref.header, ref.length, what=f"REF lease {ref.lease}")
        m = self._mapping(ref.path, ref.offset + ref.length)
        root = np.frombuffer(m.mm, dtype=np.uint8, count=ref.length, offset=ref.offset)
        weakref.finalize(root, conn.pending.append, ref.lease).atexit = False
        self.last_meta = with_metadata(dataclasses.replace(meta, lease=ref.lease), root, descs)
        out = self._emit(root, inputs(descs), private=False)
        del root
        if self.copy or self.pin_memory:
            # Nothing views the segment any more: release now rather than with the next NEXT.
            self._sendall(conn.sock, P.release(self._drain(conn.pending)))
        return out

    def _emit(self, root: np.ndarray, descs, private: bool) -> dict:
        arrays = build_views(root, descs)
        if self.pin_memory:
            torch = self._torch
            out = {}
            for k, a in arrays.items():
                t = torch.empty(a.shape, dtype=self._torch_dtypes[a.dtype], pin_memory=True)
                t.numpy()[...] = a
                out[k] = t
                self.bytes_copied += a.nbytes
            return out
        if self.copy and not private:
            arrays = {k: a.copy() for k, a in arrays.items()}
            self.bytes_copied += sum(a.nbytes for a in arrays.values())
        if self.as_torch:
            from_numpy = self._torch.from_numpy
            return {k: from_numpy(a) for k, a in arrays.items()}
        return arrays

    # ------------------------------------------------------------------ shared-memory segments

    def _mapping(self, path: str, end: int) -> _Mapping:
        try:
            st = os.lstat(path)  # the file itself, not what a link points to
        except OSError as e:
            raise StokerError(f"cannot open shared-memory segment {path}: {e}") from e
        check_segment(path, st)
        ident = (st.st_dev, st.st_ino)
        m = self._maps.get(path)
        if m is None or m.ident != ident or (m.size < end and st.st_size != m.size):
            # New, replaced (other inode) or grown: map it (again). A replaced mapping lives on
            # as long as arrays view it.
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a link swapped in meanwhile is refused
                try:
                    fst = os.fstat(fd)
                    if (fst.st_dev, fst.st_ino) != ident:
                        raise StokerError(f"the shared-memory segment {path} changed while it was being opened")
                    size = fst.st_size
                    mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
                finally:
                    os.close(fd)
            except OSError as e:
                raise StokerError(f"cannot map shared-memory segment {path}: {e} (the trainer must run "
                                  f"as the service's user)") from e
            if mm is None:
                raise ProtocolError(f"shared-memory segment {path} is empty")
            m = _Mapping(path, ident, size, mm, self.refs)
            self._maps[path] = m
        if end > m.size:
            raise ProtocolError(f"REF outside segment {path}: batch ends at byte {end}, "
                                f"the segment has {m.size}")
        m.last_ref = self.refs
        self._prune_maps(m)
        return m

    def _prune_maps(self, current: Optional[_Mapping]) -> None:
        """Drops our reference to each mapping but ``current`` whose file the service deleted or replaced
        (audit #20: a deleted segment's memory is freed only when its last mapping goes, and the service's
        ``--shm-budget`` no longer counts it), or that was not referenced in the last MAPPING_IDLE_REFS REFs.
        A mapping is unmapped once no array views it either: so a trainer keeps a deleted segment mapped
        only while it holds a batch in it, or until its next batch arrives."""
        for p, x in list(self._maps.items()):
            if x is current:
                continue
            if self.refs - x.last_ref > MAPPING_IDLE_REFS:
                del self._maps[p]
                continue
            try:
                st = os.lstat(p)
                gone = (st.st_dev, st.st_ino) != x.ident
            except OSError:
                gone = True
            if gone:
                del self._maps[p]

    def mapped_segments(self) -> List[Tuple[str, int, int]]:
        """``(path, address, size)`` of each segment this loader keeps mapped."""
        return [(m.path, m.address, m.size) for m in self._maps.values()]

    # ------------------------------------------------------------------ socket I/O

    @staticmethod
    def _drain(pending: collections.deque) -> list:
        ids = []
        while True:
            try:
                ids.append(pending.popleft())
            except IndexError:
                return ids

    #: Seconds a HELLO that could not be sent waits for the ERROR the service sent before closing.
    REFUSAL_READ_SECONDS = 2.0

    def _refusal(self, sock: socket.socket, failed: StokerError) -> Optional[StokerError]:
        """The ERROR a service sent before closing, once sending to it failed; None when it said nothing."""
        if not isinstance(failed.__cause__, OSError) or isinstance(failed.__cause__, socket.timeout):
            return None
        saved = self._deadline
        self._deadline = time.monotonic() + self.REFUSAL_READ_SECONDS
        try:
            type_, n = self._read_frame_header(sock)
            if type_ != P.ERROR:
                return None
            return _service_error(self._read_small(sock, n, type_))
        except StokerError:
            return None
        finally:
            self._deadline = saved

    def _start_request(self) -> None:
        """Starts the deadline of a request (``timeout`` from now; none when ``timeout`` is None)."""
        self._deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def _arm(self, sock: socket.socket) -> None:
        """Gives the next socket call what is left of the request's deadline; past it, the request times out."""
        if self._deadline is None:
            return
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise StokerError(f"timed out after {self.timeout:g} s waiting for the Stoker service")
        sock.settimeout(left)

    def _sendall(self, sock: socket.socket, data: bytes) -> None:
        if not data:
            return
        try:
            self._arm(sock)
            sock.sendall(data)
        except socket.timeout as e:
            raise StokerError(f"timed out sending to the Stoker service after {self.timeout:g} s") from e
        except OSError as e:
            raise StokerError(f"lost the connection to the Stoker service: {e}") from e

    def _recv_exact(self, sock: socket.socket, view: memoryview) -> None:
        got, n = 0, view.nbytes
        try:
            while got < n:
                self._arm(sock)
                k = sock.recv_into(view[got:], n - got)
                if k == 0:
                    raise StokerError(f"the Stoker service closed the connection in the middle of a frame "
                                      f"({got} of {n} bytes)")
                got += k
        except socket.timeout as e:
            raise StokerError(f"timed out after {self.timeout:g} s waiting for the Stoker service") from e
        except OSError as e:
            raise StokerError(f"lost the connection to the Stoker service: {e}") from e

    def _read_frame_header(self, sock: socket.socket) -> Tuple[int, int]:
        try:
            self._arm(sock)
            k = sock.recv_into(self._header)
        except socket.timeout as e:
            raise StokerError(f"timed out after {self.timeout:g} s waiting for the Stoker service") from e
        except OSError as e:
            raise StokerError(f"lost the connection to the Stoker service: {e}") from e
        if k == 0:
            raise StokerError("the Stoker service closed the connection")
        if k < P.FRAME.size:
            self._recv_exact(sock, memoryview(self._header)[k:])
        return P.FRAME.unpack(self._header)

    def _read_small(self, sock: socket.socket, n: int, type_: int) -> bytearray:
        if n > MAX_SMALL_FRAME:
            raise ProtocolError(f"{P.FRAME_NAMES.get(type_, type_)} frame of {n} bytes is implausibly large")
        buf = bytearray(n)
        self._recv_exact(sock, memoryview(buf))
        return buf


def _service_error(payload) -> StokerError:
    """The service's ERROR as an exception; an empty one still says where it came from (a property test's finding)."""
    return StokerError(P.decode_text(payload) or "the Stoker service sent an ERROR without a message")


def _address_range(obj) -> Tuple[int, int]:
    if isinstance(obj, np.ndarray):
        return obj.__array_interface__["data"][0], obj.nbytes
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
        return obj.data_ptr(), obj.numel() * obj.element_size()
    raise TypeError(f"expected a NumPy array or a torch tensor, got {type(obj).__name__}")


def is_view_of_segment(obj, loader: Loader) -> bool:
    """Whether the memory of ``obj`` (a NumPy array or torch tensor) lies inside a shared-memory
    segment ``loader`` has mapped now: True means it was delivered without a copy."""
    addr, n = _address_range(obj)
    return any(base <= addr and addr + n <= base + size for _, base, size in loader.mapped_segments())
