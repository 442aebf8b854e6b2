"""The Python client on a host shared with other users (issue 19, audit #19, #20): it trusts only a
socket, socket folder and shared-memory files of its own user that no one else may write, and unmaps
segments the service deleted at its next batch. Each refusal names the path and the cause, and each
test ends with a trainer served from a proper folder."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import Loader, StokerError  # noqa: E402
from fake_service import FakeService, make_batches  # noqa: E402
from test_loader import ServiceTest  # noqa: E402

NOBODY = 65534
ROOT = os.getuid() == 0


def deleted_mapped_bytes(folder: str) -> int:
    """Bytes this process has mapped of files under ``folder`` that were deleted (/proc/self/maps)."""
    n, prefix = 0, os.path.realpath(folder) + "/"
    with open("/proc/self/maps") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.endswith(" (deleted)") and prefix in line:
                lo, hi = line.split(" ", 1)[0].split("-")
                n += int(hi, 16) - int(lo, 16)
    return n


class SharedHostTest(ServiceTest):
    def service_in(self, name, batches, **kw):
        """A fake service in its own folder ``name`` (0700) under the test's temporary folder."""
        folder = os.path.join(self.tmp, name)
        os.mkdir(folder, 0o700)
        s = FakeService(folder, batches, **kw)
        self.services.append(s)
        return s

    def refused(self, address, path, cause, **kw):
        with self.assertRaises(StokerError) as cm:
            with Loader(address, 0, 1, connect_timeout=0, **kw) as loader:
                next(loader)
        self.assertIn(path, str(cm.exception))
        self.assertIn(cause, str(cm.exception))
        return cm.exception

    def served(self, **kw):
        batches = make_batches(3)
        svc = self.service_in(f"good-{len(self.services)}", batches, **kw)
        with Loader(svc.path, 0, 1) as loader:
            got = list(loader)
        self.assertEqual(len(got), 3)
        for g, b in zip(got, batches):
            for k in ("input_ids", "pixel_values"):
                self.assertTrue((g[k] == b[k]).all(), k)
        del got

    def test_a_socket_folder_others_may_write_is_refused_before_connecting(self):
        svc = self.service_in("run", make_batches(2))
        os.chmod(svc.tmpdir, 0o777)  # as a /tmp/stoker-<uid> another user made first
        self.refused(svc.path, svc.tmpdir, "writable by its group and others (mode rwxrwxrwx)")
        os.chmod(svc.tmpdir, 0o770)
        self.refused(svc.path, svc.tmpdir, "writable by its group")
        self.assertEqual(svc.hellos, [], "nothing was said to that service")
        os.chmod(svc.tmpdir, 0o700)
        with Loader(svc.path, 0, 1) as loader:
            self.assertEqual(len(list(loader)), 2)

    def test_a_socket_folder_that_is_a_link_is_refused(self):
        svc = self.service_in("real", make_batches(1))
        link = os.path.join(self.tmp, "link")
        os.symlink(svc.tmpdir, link)
        self.refused(os.path.join(link, "feed.sock"), link, "symbolic link")
        self.served()

    @unittest.skipUnless(ROOT, "making a folder another user owns needs root (chown)")
    def test_another_users_socket_folder_or_socket_is_refused(self):
        svc = self.service_in("theirs", make_batches(2))
        os.chown(svc.tmpdir, NOBODY, -1)
        self.refused(svc.path, svc.tmpdir, f"belongs to uid {NOBODY}")
        os.chown(svc.tmpdir, 0, -1)
        os.chown(svc.path, NOBODY, -1)  # another user's socket in a folder of ours
        self.refused(svc.path, svc.path, f"belongs to uid {NOBODY}")
        self.assertEqual(svc.hellos, [])
        os.chown(svc.path, 0, -1)
        with Loader(svc.path, 0, 1) as loader:
            self.assertEqual(len(list(loader)), 2)

    def test_a_segment_that_is_a_link_is_refused_and_nothing_is_mapped(self):
        svc = self.service_in("run", make_batches(2), delivery="shm", segment_for=lambda i: ("link", 0))
        victim = os.path.join(self.tmp, "victim")
        with open(victim, "wb") as f:
            f.truncate(1 << 18)
        os.chmod(victim, 0o600)
        os.symlink(victim, os.path.join(svc.shm_dir, "link"))
        with Loader(svc.path, 0, 1) as loader:
            with self.assertRaises(StokerError) as cm:
                next(loader)
            self.assertIn(os.path.join(svc.shm_dir, "link"), str(cm.exception))
            self.assertIn("symbolic link", str(cm.exception))
            self.assertEqual(loader.mapped_segments(), [])
        self.served(delivery="shm")

    def test_a_segment_others_may_write_or_another_user_owns_is_refused(self):
        cases = [("writable", lambda p: os.chmod(p, 0o666), "writable by its group and others")]
        if ROOT:
            cases.append(("owner", lambda p: os.chown(p, NOBODY, -1), f"belongs to uid {NOBODY}"))
        for name, tamper, cause in cases:
            svc = self.service_in(name, make_batches(2), delivery="shm", segment_for=lambda i: ("seg", 0))
            path = os.path.join(svc.shm_dir, "seg")
            with open(path, "wb") as f:
                f.truncate(1 << 18)
            os.chmod(path, 0o600)
            tamper(path)
            with Loader(svc.path, 0, 1) as loader:
                with self.assertRaises(StokerError) as cm:
                    next(loader)
                self.assertIn(path, str(cm.exception))
                self.assertIn(cause, str(cm.exception))
        self.served(delivery="shm")

    def test_segments_the_service_deletes_are_unmapped_at_the_next_batch(self):
        """Audit #20: the service deletes each segment once released (as the store does to make room).
        Before the fix the trainer kept every deleted file mapped for 64 REFs; now at most until its next batch."""
        steps = 12
        batches = make_batches(steps)
        svc = self.service_in("run", batches, delivery="shm", segment_for=lambda i: (f"seg-{i}", 0), segment_bytes=1 << 20)
        send_ref = svc._send_ref

        def deleting_send_ref(s, c, step, data):  # frees the released segments before making the next
            for done in range(step):
                p = os.path.join(svc.shm_dir, f"seg-{done}")
                if svc.leases.get(done) in svc.released and os.path.exists(p):
                    os.unlink(p)
            send_ref(s, c, step, data)

        svc._send_ref = deleting_send_ref
        worst = 0
        with Loader(svc.path, 0, 1, copy=True) as loader:
            for i, b in enumerate(loader):
                self.assertTrue((b["input_ids"] == batches[i]["input_ids"]).all())
                worst = max(worst, deleted_mapped_bytes(svc.shm_dir))
            after = deleted_mapped_bytes(svc.shm_dir)
        print(f"\ndeleted segments still mapped by the trainer: at most {worst} bytes during {steps} steps, "
              f"{after} at the end (segments of {1 << 20} bytes)", file=sys.stderr)
        self.assertEqual(len(svc.released), steps)
        self.assertLessEqual(worst, 1 << 20, "at most one deleted segment at any time")
        self.assertEqual(after, 0, "END drops the last one")


if __name__ == "__main__":
    unittest.main()
