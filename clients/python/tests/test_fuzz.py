"""Property tests (Hypothesis) of the client's parsers of the service's bytes: the STKB layout
(stoker.layout), the protocol's payloads (stoker.protocol) and the Loader's frame reading against a
service that answers with arbitrary bytes.

The contract each test checks: a result that agrees with the bytes, or the documented error --
ProtocolError for bytes that break docs/protocol.md, StokerError for a service that refuses or goes
away -- never another exception (struct.error, IndexError, ValueError, MemoryError), never a hang.
Example counts are bounded and the runs derandomized, so that these stay fast and repeatable in
`./stoker test`; a failure prints the falsifying example to add to the tests below.
"""

import math
import os
import socket
import struct
import sys
import tempfile
import threading
import unittest

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from stoker import Loader, ProtocolError, StokerError  # noqa: E402
from stoker import layout as L  # noqa: E402
from stoker import protocol as P  # noqa: E402
from fake_service import write_batch  # noqa: E402

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SOCKET = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow])

DTYPES = [np.float32, np.int64, np.int32, np.uint8]
NAMES = ["input_ids", "pixel_values", "sample_index", "pixel_norm", "labels", "x"]


@st.composite
def batches(draw):
    """The bytes of a valid STKB batch of up to 4 small tensors (some flagged metadata), maybe with a resume block."""
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    tensors = {}
    for name in names:
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        dtype = draw(st.sampled_from(DTYPES))
        tensors[name] = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    resume = None
    if draw(st.booleans()):
        resume = {"epoch": 1, "position": 2, "next_step": 3,
                  "sources": draw(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=3))}
    return write_batch(tensors, resume=resume)


@st.composite
def mutated_batches(draw):
    """A valid batch with a few bytes overwritten (header and descriptor fields mostly) and maybe cut short."""
    data = bytearray(draw(batches()))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data) - 1))
        width = draw(st.sampled_from([1, 4, 8]))
        value = draw(st.sampled_from([0, 1, 7, 63, 64, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1]))
        chunk = (value % (1 << (8 * width))).to_bytes(width, "little")
        data[at:at + width] = chunk[:len(data) - at]
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


def check_batch(data):
    """read_batch's result agrees with the bytes, or it raised ProtocolError."""
    try:
        arrays, meta = L.read_batch(data)
    except ProtocolError as e:
        assert str(e), "a ProtocolError says why"
        return
    assert L.HEADER_BYTES <= meta.header_bytes <= meta.total_bytes <= len(data)
    base = np.frombuffer(data, dtype=np.uint8).__array_interface__["data"][0]
    for name, a in list(arrays.items()) + list(meta.metadata.items()):
        assert a.nbytes == math.prod(a.shape) * a.itemsize, name
        if name in arrays and a.nbytes:  # a view of the batch, inside it (an empty array's pointer means nothing)
            start = a.__array_interface__["data"][0] - base
            assert meta.header_bytes <= start and start + a.nbytes <= meta.total_bytes, name


class LayoutFuzzTest(unittest.TestCase):
    @FAST
    @given(st.binary(max_size=2048))
    def test_arbitrary_bytes(self, data):
        check_batch(data)

    @FAST
    @given(mutated_batches())
    def test_mutated_batches(self, data):
        check_batch(data)

    @FAST
    @given(batches())
    def test_valid_batches_read_back(self, data):
        arrays, meta = L.read_batch(data)
        self.assertEqual(meta.total_bytes, len(data))

    @FAST
    @given(mutated_batches(), st.integers(0, 1 << 64))
    def test_ref_header_copies(self, data, available):
        """A REF carries the header and table only; its length comes separately and may be anything."""
        try:
            meta, descs = L.parse_header(data, available, what="REF")
        except ProtocolError:
            return
        self.assertLessEqual(meta.total_bytes, available)
        for d in descs:
            self.assertEqual(d.length, math.prod(d.shape) * d.dtype.itemsize)
            self.assertLessEqual(d.offset + d.length, meta.total_bytes)


class PayloadFuzzTest(unittest.TestCase):
    @FAST
    @given(st.binary(max_size=200))
    def test_welcome(self, p):
        try:
            w = P.decode_welcome(p)
        except ProtocolError:
            self.assertLess(len(p), 72)
            return
        self.assertEqual(P.Welcome(*struct.unpack_from("<IIQQQQQQQQ", p)), w)

    @FAST
    @given(st.binary(max_size=300))
    def test_ref(self, p):
        try:
            ref = P.decode_ref(p)
        except ProtocolError as e:
            self.assertTrue(str(e))
            return
        self.assertEqual(len(p), 28 + len(ref.path.encode("utf-8")) + len(ref.header))

    @FAST
    @given(st.binary(max_size=300))
    def test_text(self, p):
        self.assertIsInstance(P.decode_text(p), str)


def welcome(expected=0, delivery=P.DELIVERY_COPY, version=P.VERSION):
    return P.frame(P.WELCOME, struct.pack("<IIQQQQQQQQ", version, delivery, expected, 0, 0, 10, 0, 0, 100, 1))


frames = st.one_of(
    st.binary(max_size=64),  # garbage
    st.builds(P.frame, st.sampled_from([P.WELCOME, P.BATCH, P.END, P.ERROR, P.REF, 99]), st.binary(max_size=128)),
    st.builds(lambda b: P.frame(P.BATCH, b), batches()),
    st.builds(lambda b: P.frame(P.BATCH, b), mutated_batches()),
    st.builds(lambda t, n: struct.pack("<IQ", t, n), st.sampled_from([P.BATCH, P.ERROR, P.END, P.WELCOME]),
              st.sampled_from([0, 1, 2**31, 2**40, 2**63 - 1, 2**64 - 1])),  # a header whose payload never comes
)


class HostileService:
    """A Unix-socket 'service' that reads a HELLO and answers each connection with the bytes it is given, then closes."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "s.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(8)
        self.answer = b""

    def serve_one(self):
        conn, _ = self.server.accept()
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(4096)  # the HELLO (and maybe more); what it says does not matter here
                conn.sendall(self.answer)
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(4096):  # NEXT, RELEASE, BYE until the client closes
                    pass
            except OSError:
                pass

    def close(self):
        self.server.close()
        self.dir.cleanup()


class LoaderFuzzTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = HostileService()

    @classmethod
    def tearDownClass(cls):
        cls.service.close()

    @SOCKET
    @given(st.booleans(), st.lists(frames, max_size=5))
    def test_loader_against_arbitrary_answers(self, welcomed, answer):
        self.service.answer = (welcome() if welcomed else b"") + b"".join(answer)
        t = threading.Thread(target=self.service.serve_one, daemon=True)
        t.start()
        loader = Loader(self.service.path, shared_memory=False, timeout=5, connect_timeout=5)
        try:
            for _ in range(8):
                batch = next(loader)
                for name, a in batch.items():
                    self.assertEqual(a.nbytes, math.prod(a.shape) * a.itemsize, name)
        except StopIteration:
            pass
        except StokerError as e:  # ProtocolError included
            self.assertTrue(str(e))
        finally:
            loader.close()
        t.join(10)
        self.assertFalse(t.is_alive(), "the client did not close its connection")

    def test_absurd_batch_lengths(self):
        """Hypothesis's finding, kept as examples: a BATCH header whose length no memory holds is a StokerError
        (it was NumPy's MemoryError at 2^40 bytes and ValueError at 2^63), and so is one whose bytes never come."""
        for n in (2**31, 2**40, 2**40 + 1, 2**63 - 1, 2**64 - 1):
            self.service.answer = welcome() + struct.pack("<IQ", P.BATCH, n)
            t = threading.Thread(target=self.service.serve_one, daemon=True)
            t.start()
            loader = Loader(self.service.path, shared_memory=False, timeout=5, connect_timeout=5)
            try:
                with self.assertRaises(StokerError, msg=str(n)) as e:
                    next(loader)
                self.assertIn(str(n), str(e.exception))
            finally:
                loader.close()
            t.join(10)

    def test_empty_error(self):
        """Hypothesis's finding: an ERROR without a message still says what it is."""
        for answer in (P.frame(P.ERROR), welcome() + P.frame(P.ERROR)):
            self.service.answer = answer
            t = threading.Thread(target=self.service.serve_one, daemon=True)
            t.start()
            loader = Loader(self.service.path, shared_memory=False, timeout=5, connect_timeout=5)
            try:
                with self.assertRaises(StokerError) as e:
                    next(loader)
                self.assertEqual("the Stoker service sent an ERROR without a message", str(e.exception))
            finally:
                loader.close()
            t.join(10)


if __name__ == "__main__":
    unittest.main()
