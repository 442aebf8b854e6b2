import gc
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import Loader, ProtocolError, StokerError, is_view_of_segment  # noqa: E402
from stoker import protocol as P  # noqa: E402
from fake_service import METADATA, FakeService, make_batches  # noqa: E402


class ServiceTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.services = []

    def tearDown(self):
        for s in self.services:
            s.close()
        gc.collect()
        self._tmp.cleanup()

    def service(self, batches, **kw):
        s = FakeService(self.tmp, batches, **kw)
        self.services.append(s)
        return s

    def assertBatchEqual(self, got, expected, meta=None):
        """``got`` holds exactly ``expected``'s model inputs, in order; with ``meta`` (the loader's last_meta),
        its metadata arrays equal ``expected``'s metadata tensors."""
        inputs = {k: v for k, v in expected.items() if k not in METADATA}
        self.assertEqual(list(got), list(inputs), "model inputs only, in table order")
        if meta is not None:
            self.assertEqual(list(meta.metadata), [k for k in expected if k in METADATA], "the metadata, in table order")
            for k in meta.metadata:
                self.assertIs(meta.metadata[k], getattr(meta, k))
                self.assertTrue(meta.metadata[k].flags.owndata, f"{k} is a copy: it holds no lease")
                self.assertEqual(meta.metadata[k].dtype, expected[k].dtype, k)
                np.testing.assert_array_equal(meta.metadata[k], expected[k], err_msg=k)
        for k, v in inputs.items():
            g = got[k]
            g = g.numpy() if hasattr(g, "numpy") and not isinstance(g, np.ndarray) else g
            self.assertEqual(g.dtype, v.dtype, k)
            self.assertEqual(g.shape, v.shape, k)
            np.testing.assert_array_equal(g, v, err_msg=k)


class CopyDeliveryTest(ServiceTest):
    def test_exact_arrays_meta_and_end(self):
        batches = make_batches(5, pixels=(700, 1176))  # ~3.3 MB each: several recv_into per batch
        svc = self.service(batches, delivery="copy", steps_per_epoch=2)
        with Loader(svc.path, 0, 1, job="jobA") as loader:
            got = []
            for b in loader:
                got.append(b)
                meta = loader.last_meta
                i = len(got) - 1
                self.assertBatchEqual(b, batches[i], meta)
                self.assertEqual((meta.epoch, meta.step, meta.global_step), (i // 2, i % 2, i))
                self.assertEqual((meta.rank, meta.world, meta.samples, meta.scheduled), (0, 1, 2, 2))
                self.assertIsNone(meta.lease)
            self.assertEqual(loader.delivery, "copy")
            self.assertEqual(len(got), 5)
            for g, e in zip(got, batches):
                self.assertBatchEqual(g, e)
                self.assertTrue(g["input_ids"].flags.writeable)
                self.assertEqual(g["pixel_values"].__array_interface__["data"][0] % 64, 0)
            self.assertEqual(loader.batches, 5)
            self.assertEqual(loader.bytes_copied, 0)
            self.assertGreater(loader.bytes_received, 5 * 700 * 1176 * 4)
            with self.assertRaises(StopIteration):
                next(loader)  # END is sticky
        self.assertTrue(svc.wait_done())
        self.assertEqual(svc.hellos[0]["job"], "jobA")
        self.assertEqual(svc.hellos[0]["flags"], 1)  # accepts shared memory, not resuming
        self.assertEqual(svc.kinds()[-1], "BYE")
        self.assertEqual(svc.violations, [])

    def test_shared_memory_off_asks_for_copies(self):
        svc = self.service(make_batches(2), delivery="shm")
        with Loader(svc.path, 0, 1, shared_memory=False) as loader:
            b = next(loader)
            self.assertEqual(loader.delivery, "copy")
            self.assertBatchEqual(b, make_batches(2)[0])
        self.assertEqual(svc.hellos[0]["flags"], 0)

    def test_buffer_reused_only_when_batch_dropped(self):
        batches = make_batches(4)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1) as loader:
            b0 = next(loader)
            a0 = b0["input_ids"].__array_interface__["data"][0]
            b1 = next(loader)  # b0 alive: must not be overwritten
            self.assertBatchEqual(b0, batches[0])
            a1 = b1["input_ids"].__array_interface__["data"][0]
            self.assertNotEqual(a0, a1)
            del b0
            gc.collect()
            b2 = next(loader)
            self.assertEqual(b2["input_ids"].__array_interface__["data"][0], a0, "buffer recycled")
            self.assertBatchEqual(b1, batches[1])
            self.assertBatchEqual(b2, batches[2])

    def test_expected_batch_bytes_preallocates(self):
        batches = make_batches(3)
        svc = self.service(batches, delivery="copy", expected_batch_bytes=1 << 16)
        with Loader(svc.path, 0, 1) as loader:
            for i, b in enumerate(loader):
                self.assertBatchEqual(b, batches[i])

    def test_copy_flag_is_noop_for_copy_delivery(self):
        svc = self.service(make_batches(2), delivery="copy")
        with Loader(svc.path, 0, 1, copy=True) as loader:
            self.assertBatchEqual(next(loader), make_batches(2)[0])
            self.assertEqual(loader.bytes_copied, 0)

    def test_malformed_batch_payload(self):
        def corrupt(step, data):
            data = bytearray(data)
            struct.pack_into("<Q", data, 64 + 88, 1 << 40)  # descriptor 0 offset far outside
            return bytes(data)

        svc = self.service(make_batches(2), delivery="copy", corrupt=corrupt)
        loader = Loader(svc.path, 0, 1)
        with self.assertRaises(ProtocolError) as cm:
            next(loader)
        self.assertIn("'input_ids'", str(cm.exception))
        self.assertIn("outside the batch", str(cm.exception))
        with self.assertRaises(StokerError):
            next(loader)  # the connection is gone
        loader.close()


class SharedMemoryTest(ServiceTest):
    def test_exact_arrays_zero_copy(self):
        batches = make_batches(6)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1) as loader:
            got = []
            for b in loader:
                self.assertBatchEqual(b, batches[len(got)], loader.last_meta)  # the metadata copied out of the segment
                got.append(b)
            self.assertEqual(loader.delivery, "shared_memory")
            self.assertEqual(len(got), 6)
            for i, (g, e) in enumerate(zip(got, batches)):
                self.assertBatchEqual(g, e)
                roots = {id(a.base) for a in g.values()}
                self.assertEqual(len(roots), 1, "all tensors view one per-batch root")
                for a in g.values():
                    self.assertTrue(is_view_of_segment(a, loader), f"batch {i}: array inside the mapping")
                    self.assertFalse(a.flags.writeable)
                    self.assertFalse(a.flags.owndata)
            self.assertEqual(loader.last_meta.lease, svc.leases[5])
            self.assertEqual(loader.bytes_copied, 0)
            self.assertEqual(loader.bytes_received, 0)
            self.assertEqual(loader.refs, 6)
            self.assertEqual(len(loader.mapped_segments()), 2)  # seg-0 (batches 0-3), seg-1 (4-5)
            self.assertFalse(is_view_of_segment(np.zeros(4), loader))
        self.assertEqual(svc.violations, [])

    def test_lease_released_only_after_views_die(self):
        svc = self.service(make_batches(6), delivery="shm")
        loader = Loader(svc.path, 0, 1)
        b0 = next(loader)
        l0 = svc.leases[0]
        ids = b0["input_ids"]  # one view kept beyond the dict
        del b0
        gc.collect()
        b1 = next(loader)
        self.assertEqual(svc.released, [], "a view of batch 0 is still alive")
        del ids
        gc.collect()
        self.assertEqual(svc.released, [], "nothing is sent from the finalizer")
        b2 = next(loader)
        self.assertEqual(svc.released, [l0])
        conn_kinds = svc.kinds(1)
        # the RELEASE travelled right before the third NEXT
        self.assertEqual(conn_kinds[-3:], ["RELEASE", "NEXT", "REF"])
        # batch 1 dropped, batch 2 held: close sends RELEASE for 1 only, then BYE
        del b1
        gc.collect()
        loader.close()
        loader.close()  # idempotent
        self.assertTrue(svc.wait_done())
        self.assertEqual(svc.released, [l0, svc.leases[1]])
        self.assertEqual(svc.kinds(1)[-2:], ["RELEASE", "BYE"])
        self.assertEqual(svc.held, {}, "batch 2's lease went with the disconnect")
        self.assertEqual(svc.violations, [])
        self.assertBatchEqual(b2, make_batches(6)[2])  # the mapping outlives the loader's cache

    def test_many_pending_releases_in_one_frame(self):
        svc = self.service(make_batches(12), delivery="shm")
        with Loader(svc.path, 0, 1) as loader:
            held = [next(loader) for _ in range(10)]
            del held
            gc.collect()
            next(loader)
            releases = [e[2] for e in svc.events if e[1] == "RELEASE"]
            self.assertEqual(len(releases), 1)
            self.assertEqual(sorted(releases[0]), [svc.leases[i] for i in range(10)])

    def test_copy_true_releases_at_once(self):
        batches = make_batches(3)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1, copy=True) as loader:
            b = next(loader)
            self.assertTrue(svc.wait_for(lambda: svc.released == [svc.leases[0]]))
            self.assertBatchEqual(b, batches[0])
            for a in b.values():
                self.assertFalse(is_view_of_segment(a, loader))
                self.assertTrue(a.flags.owndata)
            self.assertEqual(loader.bytes_copied, sum(a.nbytes for k, a in batches[0].items() if k not in METADATA))

    def test_idle_mapping_dropped_after_64_refs(self):
        n = 70
        batches = make_batches(n, pixels=(1, 16))
        slot = 4096
        svc = self.service(batches, delivery="shm", segment_bytes=n * slot,
                           segment_for=lambda i: ("seg-a", 0) if i == 0 else ("seg-b", i * slot))
        with Loader(svc.path, 0, 1) as loader:
            first = next(loader)
            a_path = os.path.join(svc.shm_dir, "seg-a")
            for i in range(1, 66):
                b = next(loader)
                paths = [p for p, _, _ in loader.mapped_segments()]
                if i <= 64:
                    self.assertIn(a_path, paths, i)
            self.assertNotIn(a_path, [p for p, _, _ in loader.mapped_segments()])
            self.assertEqual(len(loader.mapped_segments()), 1)
            self.assertBatchEqual(first, batches[0])  # still readable: our view keeps it mapped
            self.assertBatchEqual(b, batches[65])

    def test_replaced_segment_file_is_remapped(self):
        batches = make_batches(3)
        svc = self.service(batches, delivery="shm", segment_for=lambda i: ("seg", 0))
        with Loader(svc.path, 0, 1, copy=True) as loader:
            self.assertBatchEqual(next(loader), batches[0])
            path = os.path.join(svc.shm_dir, "seg")
            os.unlink(path)  # the service deletes the segment and creates a new one at the same path
            self.assertBatchEqual(next(loader), batches[1])
            self.assertEqual(len(loader.mapped_segments()), 1)

    def test_malformed_ref_header(self):
        def bad_magic(step, header):
            return b"XXXX" + header[4:]

        svc = self.service(make_batches(2), delivery="shm", corrupt=bad_magic)
        with Loader(svc.path, 0, 1) as loader:
            with self.assertRaises(ProtocolError) as cm:
                next(loader)
            self.assertIn("magic", str(cm.exception))
            self.assertIn("REF lease", str(cm.exception))

    def test_ref_outside_segment(self):
        svc = self.service(make_batches(2), delivery="shm", segment_bytes=4096,
                           segment_for=lambda i: ("small", 0))
        # a REF whose batch reaches past the end of its 4096-byte segment file
        def send_ref(s, c, step, data):
            path = os.path.join(svc.shm_dir, "small")
            with open(path, "wb") as f:
                f.truncate(4096)
            lease = 7
            svc.held[lease] = (c, step)
            p = path.encode()
            header = data[:struct.unpack_from("<I", data, 12)[0]]
            svc._send(s, 15, struct.pack("<QQQI", lease, 0, len(data), len(p)) + p + header)

        svc._send_ref = send_ref
        with Loader(svc.path, 0, 1) as loader:
            with self.assertRaises(ProtocolError) as cm:
                next(loader)
            self.assertIn("outside segment", str(cm.exception))


class HandshakeTest(ServiceTest):
    def test_rank_outside_world(self):
        svc = self.service(make_batches(1))
        loader = Loader(svc.path, 3, 2)
        with self.assertRaises(StokerError) as cm:
            next(loader)
        self.assertEqual(str(cm.exception), "rank 3 is outside the world of 2 ranks")
        loader.close()

    def test_hello_error_message(self):
        svc = self.service(make_batches(1), hello_error="job 'x' is not served here")
        loader = Loader(svc.path, 0, 1)
        with self.assertRaises(StokerError) as cm:
            loader.connect()
        self.assertEqual(str(cm.exception), "job 'x' is not served here")
        self.assertNotIsInstance(cm.exception, ProtocolError)

    def test_a_service_that_refused_and_closed_before_the_hello_is_quoted(self):
        # CI stop 37: over its connection cap, a service writes its ERROR and closes before the HELLO is sent, so
        # sending the HELLO fails with a broken pipe; the trainer must still see what the service said.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.sendall(P.frame(P.ERROR, "over the cap: connection refused".encode()))
        theirs.close()
        loader = Loader(os.path.join(self.tmp, "unused.sock"), 1, 2)
        with mock.patch.object(loader, "_connect_socket", return_value=ours):
            with self.assertRaises(StokerError) as cm:
                loader.connect()
        self.assertEqual(str(cm.exception), "over the cap: connection refused")
        self.assertIn("lost the connection", str(cm.exception.__cause__))
        loader.close()

    def test_a_send_that_fails_with_nothing_said_reports_the_send_error(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.close()
        loader = Loader(os.path.join(self.tmp, "unused.sock"), 0, 1)
        with mock.patch.object(loader, "_connect_socket", return_value=ours):
            with self.assertRaises(StokerError) as cm:
                loader.connect()
        self.assertIn("lost the connection to the Stoker service", str(cm.exception))
        loader.close()

    def test_version_mismatch(self):
        svc = self.service(make_batches(1), version=P.VERSION + 1)
        with Loader(svc.path, 0, 1) as loader:
            with self.assertRaises(StokerError) as cm:
                next(loader)
        self.assertEqual(str(cm.exception), f"protocol version {P.VERSION} is not supported; this service speaks version {P.VERSION + 1}")
        self.assertEqual(svc.hellos, [])

    def test_welcome_with_other_version(self):
        svc = self.service(make_batches(1), welcome_version=P.VERSION + 1)
        with Loader(svc.path, 0, 1) as loader:
            with self.assertRaises(ProtocolError) as cm:
                next(loader)
        self.assertIn(f"protocol version {P.VERSION + 1}", str(cm.exception))

    def test_no_service(self):
        with self.assertRaises(StokerError) as cm:
            Loader(os.path.join(self.tmp, "nothing.sock"), 0, 1, connect_timeout=0).connect()
        self.assertIn("cannot connect", str(cm.exception))

    def test_connect_retries_until_the_deadline_then_names_it_the_socket_and_the_cause(self):
        path = os.path.join(self.tmp, "late.sock")
        t0 = time.monotonic()
        with self.assertRaises(StokerError) as cm:
            Loader(path, 0, 1, connect_timeout=0.4).connect()
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 0.4)
        self.assertLess(elapsed, 3.0)
        message = str(cm.exception)
        self.assertIn("0.4 s connect_timeout", message)
        self.assertIn(path, message)
        self.assertIn("No such file or directory", message)
        # a socket file nobody listens on (a service that died): refused, retried, then the same error
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(stale.close)
        stale.bind(os.path.join(self.tmp, "stale.sock"))
        with self.assertRaises(StokerError) as cm:
            Loader(os.path.join(self.tmp, "stale.sock"), 0, 1, connect_timeout=0.2).connect()
        self.assertIn("Connection refused", str(cm.exception))

    def test_connect_waits_for_a_service_that_starts_later(self):
        late = os.path.join(self.tmp, "late")
        os.makedirs(late)
        starter = threading.Timer(0.5, lambda: self.services.append(FakeService(late, make_batches(2))))
        starter.start()
        self.addCleanup(starter.cancel)
        with Loader(os.path.join(late, "feed.sock"), 0, 1, connect_timeout=20) as loader:
            got = list(loader)
        self.assertEqual(len(got), 2)

    def test_connect_waits_while_a_dead_services_socket_refuses(self):
        restarted = os.path.join(self.tmp, "restarted")
        os.makedirs(restarted)
        path = os.path.join(restarted, "feed.sock")
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)  # bound, never listening: connecting is refused, as at a dead service's socket file

        def restart():
            stale.close()
            os.unlink(path)
            self.services.append(FakeService(restarted, make_batches(1)))

        starter = threading.Timer(0.5, restart)
        starter.start()
        self.addCleanup(starter.cancel)
        with Loader(path, 0, 1, connect_timeout=20) as loader:
            self.assertEqual(len(list(loader)), 1)

    def test_connect_timeout_is_checked(self):
        with self.assertRaises(ValueError):
            Loader(os.path.join(self.tmp, "x.sock"), 0, 1, connect_timeout=-1)

    def test_each_next_after_a_batch_carries_its_wait_and_step(self):
        svc = self.service(make_batches(3))
        with Loader(svc.path, 0, 1, keep_timings=2) as loader:
            waits = []
            for _ in loader:
                waits.append(loader.last_wait_ns)
                time.sleep(0.03)  # the simulated step
            self.assertTrue(svc.wait_for(lambda: len(svc.timings) == 3))
        self.assertEqual(svc.kinds().count("NEXT"), 4, "three batches, then END")
        self.assertEqual([w for _, w, _ in svc.timings], waits, "the waits the loader measured, in order")
        for rank, wait, step in svc.timings:
            self.assertEqual(rank, 0)
            self.assertGreater(wait, 0)
            self.assertGreaterEqual(step, 30_000_000)
            self.assertLess(step, 5_000_000_000)
        self.assertEqual(loader.timings(), [(w, st) for _, w, st in svc.timings][-2:], "the last keep_timings steps")
        ratio = loader.wait_ratio()
        w = sum(x for x, _ in loader.timings())
        self.assertAlmostEqual(ratio, w / (w + sum(x for _, x in loader.timings())))

    def test_the_first_next_carries_no_timing_and_a_reconnect_keeps_measuring(self):
        svc = self.service(make_batches(4))
        loader = Loader(svc.path, 0, 1)
        next(loader)
        self.assertEqual(svc.timings, [])
        state = loader.state_dict()
        loader.load_state_dict(state)  # reconnects
        next(loader)
        self.assertTrue(svc.wait_for(lambda: len(svc.timings) == 1), "the step before the reconnect is reported on the new connection")
        loader.close()
        self.assertEqual(svc.violations, [])


    def test_default_address(self):
        with mock.patch.dict(os.environ, {"XDG_RUNTIME_DIR": "/run/user/42"}):
            self.assertEqual(Loader(None, 0, 1, job="sft").address, "/run/user/42/stoker/sft.sock")

    def test_error_mid_stream(self):
        svc = self.service(make_batches(5), delivery="shm", error_after=(2, "source failed: s3://b/x.jpg"))
        with Loader(svc.path, 0, 1) as loader:
            next(loader), next(loader)
            with self.assertRaises(StokerError) as cm:
                next(loader)
            self.assertEqual(str(cm.exception), "source failed: s3://b/x.jpg")
            with self.assertRaises(StokerError) as cm:
                next(loader)
            self.assertIn("load_state_dict", str(cm.exception))

    def test_service_vanishes(self):
        svc = self.service(make_batches(5), drop_after=1)
        with Loader(svc.path, 0, 1) as loader:
            next(loader)
            with self.assertRaises(StokerError) as cm:
                next(loader)
            self.assertIn("closed the connection", str(cm.exception))

    def test_timeout(self):
        import socket as s
        srv = s.socket(s.AF_UNIX, s.SOCK_STREAM)
        path = os.path.join(self.tmp, "silent.sock")
        srv.bind(path)
        srv.listen(1)
        try:
            with self.assertRaises(StokerError) as cm:
                Loader(path, 0, 1, timeout=0.2).connect()
            self.assertIn("timed out", str(cm.exception))
        finally:
            srv.close()

    def test_requests_have_a_deadline_by_default(self):
        """Audit #27: without a word from the user, a wedged service fails the trainer with an error that
        says so (after DEFAULT_TIMEOUT s), rather than hanging it until the collectives time out."""
        from stoker.loader import DEFAULT_TIMEOUT
        self.assertEqual(DEFAULT_TIMEOUT, 600.0)
        svc = self.service(make_batches(3))
        self.assertEqual(Loader(svc.path, 0, 1).timeout, DEFAULT_TIMEOUT)
        self.assertEqual(Loader.from_env(address=svc.path).timeout, DEFAULT_TIMEOUT)
        self.assertIsNone(Loader(svc.path, 0, 1, timeout=None).timeout)

    def test_a_wedged_service_times_the_request_out_and_a_resume_gets_everything(self):
        batches = make_batches(4)
        svc = self.service(batches, stall_after=(2, 1.5))
        loader = Loader(svc.path, 0, 1, timeout=0.5)
        for i in range(2):
            np.testing.assert_array_equal(next(loader)["input_ids"], batches[i]["input_ids"])
        state = loader.state_dict()
        with self.assertRaises(StokerError) as cm:
            next(loader)
        self.assertEqual("timed out after 0.5 s waiting for the Stoker service", str(cm.exception))
        loader.close()
        self.assertTrue(svc.wait_done(1, timeout=10))  # the stalled answer went nowhere
        with Loader(svc.path, 0, 1, timeout=10) as again:  # resumed from the state: nothing skipped
            again.load_state_dict(state)
            got = [b["input_ids"] for b in again]
        self.assertEqual(2, len(got))
        np.testing.assert_array_equal(got[0], batches[2]["input_ids"])

    def test_the_deadline_is_end_to_end_not_per_read(self):
        """A service that sends a batch a few bytes at a time, each read well within the timeout, still
        cannot make a request last longer than it."""
        svc = self.service(make_batches(2), trickle_after=(0, 0.02))
        with Loader(svc.path, 0, 1, timeout=0.5) as loader:
            t0 = time.monotonic()
            with self.assertRaises(StokerError) as cm:
                next(loader)
            self.assertIn("timed out after 0.5 s", str(cm.exception))
            self.assertLess(time.monotonic() - t0, 30.0)  # a hang guard, not a speed check

    def test_timeout_none_waits_for_a_slow_service(self):
        batches = make_batches(2)
        svc = self.service(batches, stall_after=(0, 0.6))
        with Loader(svc.path, 0, 1, timeout=None) as loader:
            np.testing.assert_array_equal(next(loader)["input_ids"], batches[0]["input_ids"])

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            Loader("x", -1, 1)
        with self.assertRaises(ValueError):
            Loader("x", 0, 1, pin_memory=True)


class StateTest(ServiceTest):
    def test_round_trip_resumes(self):
        batches = make_batches(8)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 1, 2, job="j") as loader:
            self.assertEqual(loader.state_dict()["next_step"], 0)
            for _ in range(3):
                next(loader)
            state = loader.state_dict()
        self.assertEqual(state, {"job": "j", "rank": 1, "world_size": 2, "fingerprint": 0xF00D,
                                 "epoch": 0, "position": 3, "next_step": 3})
        svc.positions[1] = 6  # the service's feed moved on; the trainer restarts from its checkpoint
        with Loader(svc.path, 1, 2, job="j") as again:
            again.load_state_dict(state)
            self.assertEqual(again.state_dict(), state)
            b = next(again)
            self.assertBatchEqual(b, batches[3])
            self.assertEqual(again.last_meta.global_step, 3)
            self.assertEqual(again.state_dict()["next_step"], 4)
        hello = svc.hellos[-1]
        self.assertEqual((hello["flags"], hello["epoch"], hello["position"], hello["fingerprint"], hello["label"]),
                         (7, 0, 3, 0xF00D, 3), "the saved next_step goes with the cursor (resume_step)")
        self.assertEqual(svc.hellos[0]["flags"] & 6, 0)

    def test_a_state_without_next_step_sends_no_resume_step(self):
        svc = self.service(make_batches(4))
        with Loader(svc.path, 0, 1) as loader:
            loader.load_state_dict({"job": "default", "epoch": 0, "position": 2, "fingerprint": 0xF00D})
            next(loader)
        self.assertEqual((svc.hellos[-1]["flags"] & 6, svc.hellos[-1]["label"]), (2, None))
        with self.assertRaises(ValueError):
            Loader(svc.path, 0, 1).load_state_dict({"job": "default", "epoch": 0, "position": 2, "fingerprint": 0xF00D,
                                                    "next_step": -1})

    def test_load_while_connected_reconnects(self):
        batches = make_batches(6)
        svc = self.service(batches, delivery="copy")
        with Loader(svc.path, 0, 1) as loader:
            next(loader), next(loader), next(loader)
            state = loader.state_dict()
            state["position"] = 1
            loader.load_state_dict(state)
            self.assertEqual(len(svc.hellos), 2, "reconnected at once")
            self.assertBatchEqual(next(loader), batches[1])
            self.assertEqual(loader.state_dict()["next_step"], 2)
        self.assertEqual(svc.kinds(1)[-1], "BYE")

    def test_state_after_end_and_reload(self):
        svc = self.service(make_batches(2))
        with Loader(svc.path, 0, 1) as loader:
            self.assertEqual(len(list(loader)), 2)
            self.assertEqual(loader.state_dict()["next_step"], 2)
            self.assertEqual((loader.state_dict()["epoch"], loader.state_dict()["position"]), (1, 0))
            loader.load_state_dict({**loader.state_dict(), "epoch": 0, "position": 0})
            self.assertEqual(len(list(loader)), 2)

    def test_wrong_state(self):
        loader = Loader("unused", 0, 2)
        for bad in ({"job": "other", "rank": 0, "world_size": 2, "epoch": 0, "position": 0, "fingerprint": 0},
                    {"job": "default", "rank": 0, "world_size": 2, "next_step": 0, "fingerprint": 0},  # protocol 2's state
                    {"job": "default", "epoch": -1, "position": 0, "fingerprint": 0},
                    {"job": "default", "epoch": 0, "position": "3", "fingerprint": 0},
                    {"rank": 0, "world_size": 2}):
            with self.assertRaises(ValueError):
                loader.load_state_dict(bad)

    def test_state_without_fingerprint_is_refused(self):
        """A cursor past the start with fingerprint 0 cannot be checked against the job: refused
        before any HELLO, also on a connected loader (which then keeps its connection)."""
        svc = self.service(make_batches(4))
        with Loader(svc.path, 0, 1) as loader:
            for epoch, position in ((0, 1), (2, 0)):
                with self.assertRaises(ValueError) as cm:
                    loader.load_state_dict({"job": "default", "rank": 0, "world_size": 1, "fingerprint": 0,
                                            "epoch": epoch, "position": position})
                self.assertIn(f"epoch {epoch}, position {position}", str(cm.exception))
                self.assertIn("fingerprint is 0", str(cm.exception))
            self.assertEqual(svc.hellos, [])
            loader.load_state_dict({"job": "default", "epoch": 0, "position": 0, "fingerprint": 0})  # the start: fine
            next(loader), next(loader)
            with self.assertRaises(ValueError):
                loader.load_state_dict({**loader.state_dict(), "fingerprint": 0})
            self.assertEqual(len(svc.hellos), 1, "no reconnect for a refused state")
            self.assertEqual(loader.state_dict()["position"], 2)
            next(loader)
        self.assertEqual(svc.hellos[0]["flags"] & 2, 2)

    def test_state_of_another_rank_and_world_size_resumes(self):
        """The cursor is global: rank 1 of 2's state resumes rank 0 of 3 (a resized job)."""
        batches = make_batches(8)
        svc = self.service(batches)
        with Loader(svc.path, 1, 2) as loader:
            next(loader), next(loader)
            state = loader.state_dict()
        with Loader(svc.path, 0, 3) as resized:
            resized.load_state_dict(state)
            self.assertBatchEqual(next(resized), batches[2])
            self.assertEqual((resized.state_dict()["epoch"], resized.state_dict()["position"]), (0, 3))
        self.assertEqual((svc.hellos[-1]["rank"], svc.hellos[-1]["world"], svc.hellos[-1]["position"]), (0, 3, 2))

    def test_cursor_crosses_the_epoch_boundary(self):
        batches = make_batches(6)
        svc = self.service(batches, steps_per_epoch=3)
        with Loader(svc.path, 0, 1) as loader:
            for _ in range(4):
                next(loader)
            state = loader.state_dict()
        self.assertEqual((state["epoch"], state["position"], state["next_step"]), (1, 1, 4))
        with Loader(svc.path, 0, 1) as again:
            again.load_state_dict(state)
            self.assertBatchEqual(next(again), batches[4])

    def test_fingerprint_mismatch(self):
        svc = self.service(make_batches(2))
        loader = Loader(svc.path, 0, 1)
        loader.load_state_dict({"job": "default", "rank": 0, "world_size": 1, "epoch": 0, "position": 1, "fingerprint": 0xBAD})
        with self.assertRaises(StokerError) as cm:
            next(loader)
        self.assertIn("fingerprint", str(cm.exception))
        loader.close()


class FromEnvTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.svc = FakeService(self.tmp, make_batches(2))

    def tearDown(self):
        self.svc.close()
        gc.collect()
        self._tmp.cleanup()

    ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STOKER_SOCKET", "STOKER_JOB", "STOKER_CONNECT_TIMEOUT")

    def env(self, **values):
        cleared = {k: v for k, v in os.environ.items() if k not in self.ENV}
        cleared.update(values)
        return mock.patch.dict(os.environ, cleared, clear=True)

    def test_torchrun_variables_and_the_socket_and_job(self):
        with self.env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", STOKER_SOCKET=self.svc.path, STOKER_JOB="sft",
                      STOKER_CONNECT_TIMEOUT="7.5"):
            loader = Loader.from_env()
        with loader:
            next(loader)
        self.assertEqual((loader.rank, loader.world_size, loader.local_rank, loader.job), (1, 2, 1, "sft"))
        self.assertEqual(loader.address, self.svc.path)
        self.assertEqual(loader.connect_timeout, 7.5)
        hello = self.svc.hellos[0]
        self.assertEqual((hello["rank"], hello["world"], hello["job"]), (1, 2, "sft"))

    def test_defaults_when_unset(self):
        with self.env(XDG_RUNTIME_DIR="/run/user/42"):
            loader = Loader.from_env()
        self.assertEqual((loader.rank, loader.world_size, loader.local_rank, loader.job), (0, 1, 0, "default"))
        self.assertEqual(loader.address, "/run/user/42/stoker/default.sock")
        self.assertEqual(loader.connect_timeout, 120.0)
        with self.env(XDG_RUNTIME_DIR="/run/user/42", STOKER_JOB="sft"):
            self.assertEqual(Loader.from_env().address, "/run/user/42/stoker/sft.sock", "the job's default socket")

    def test_keyword_arguments_override_and_pass_through(self):
        with self.env(RANK="1", WORLD_SIZE="2", STOKER_SOCKET="/nowhere.sock", STOKER_JOB="sft"):
            loader = Loader.from_env(address=self.svc.path, rank=0, world_size=1, job="other", connect_timeout=0,
                                     local_rank=3, copy=True, keep_timings=5)
        self.assertEqual((loader.rank, loader.world_size, loader.local_rank, loader.job), (0, 1, 3, "other"))
        self.assertEqual((loader.address, loader.connect_timeout, loader.copy, loader.waits.maxlen),
                         (self.svc.path, 0.0, True, 5))

    def test_a_variable_that_is_not_a_number_is_named(self):
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STOKER_CONNECT_TIMEOUT"):
            with self.env(**{name: "two"}):
                with self.assertRaises(ValueError) as cm:
                    Loader.from_env()
            self.assertIn(name, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
