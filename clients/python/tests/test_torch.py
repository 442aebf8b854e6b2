import gc
import os
import sys
import unittest
import warnings
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # pragma: no cover
    torch = None

from stoker import Loader, StokerError, is_view_of_segment, parse_header  # noqa: E402
from fake_service import make_batches, write_batch  # noqa: E402
from test_loader import ServiceTest  # noqa: E402


@unittest.skipIf(torch is None, "torch is not installed")
class TorchLoaderTest(ServiceTest):
    def test_tensors_view_the_segment(self):
        batches = make_batches(3)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1, as_torch=True) as loader:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
                b = next(loader)
            self.assertBatchEqual(b, batches[0])
            (path, base, _), = loader.mapped_segments()
            _, descs = parse_header(write_batch(batches[0]), 1 << 30)
            seg_offset = svc.segment_for(0)[1]
            self.assertEqual(list(b), [d.name for d in descs if not d.metadata])
            for d in descs:
                if d.metadata:
                    continue
                t = b[d.name]
                self.assertIsInstance(t, torch.Tensor)
                self.assertEqual(t.data_ptr(), base + seg_offset + d.offset, d.name)
                self.assertTrue(is_view_of_segment(t, loader))
            self.assertEqual(loader.bytes_copied, 0)
            # a tensor alone keeps the batch leased
            t = b["pixel_values"]
            del b
            gc.collect()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                next(loader)
            self.assertEqual(svc.released, [])
            del t
            gc.collect()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                next(loader)
            self.assertEqual(sorted(svc.released), [svc.leases[0], svc.leases[1]])

    def test_copy_delivery_tensors_are_writable(self):
        batches = make_batches(2)
        svc = self.service(batches, delivery="copy")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with Loader(svc.path, 0, 1, as_torch=True) as loader:
                b = next(loader)
                b["labels"][b["labels"] == -100] = 0  # in place
                self.assertEqual(int((b["labels"] == -100).sum()), 0)

    def test_pin_memory(self):
        batches = make_batches(2)
        svc = self.service(batches, delivery="shm")
        if torch.cuda.is_available():
            loader = Loader(svc.path, 0, 1, as_torch=True, pin_memory=True)
            b = next(loader)
            self.assertTrue(all(t.is_pinned() for t in b.values()))
            self.assertEqual(loader.bytes_copied, sum(a.nbytes for a in batches[0].values()))
            self.assertTrue(svc.wait_for(lambda: svc.released == [svc.leases[0]]))
        else:
            with self.assertWarnsRegex(RuntimeWarning, "CUDA is not available"):
                loader = Loader(svc.path, 0, 1, as_torch=True, pin_memory=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                b = next(loader)
            self.assertFalse(any(t.is_pinned() for t in b.values()))
            self.assertTrue(is_view_of_segment(b["input_ids"], loader))
        self.assertBatchEqual(b, batches[0])
        loader.close()

    def test_copy_true_owned_tensors(self):
        batches = make_batches(2)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1, as_torch=True, copy=True) as loader:
            b = next(loader)
            self.assertFalse(is_view_of_segment(b["input_ids"], loader))
            b["input_ids"].add_(1)  # owned and writable
            np.testing.assert_array_equal(b["input_ids"].numpy(), batches[0]["input_ids"] + 1)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchDatasetTest(ServiceTest):
    def test_dataloader_yields_the_batches(self):
        from stoker import TorchIterableDataset
        batches = make_batches(4)
        for delivery in ("copy", "shm"):
            with self.subTest(delivery=delivery):
                svc = self.service(batches, delivery=delivery)
                ds = TorchIterableDataset(svc.path, world_size=1, rank=0)
                got = []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    for b in DataLoader(ds, batch_size=None, num_workers=0):
                        got.append(b)
                self.assertEqual(len(got), 4)
                for g, e in zip(got, batches):
                    self.assertTrue(all(isinstance(t, torch.Tensor) for t in g.values()))
                    self.assertBatchEqual(g, e)
                self.assertEqual(ds.loader.last_meta.global_step, 3)
                self.assertTrue(svc.wait_done())
                self.assertEqual(svc.kinds(1)[-1], "BYE", "closed at the end of the feed")
                svc.close()
                os.unlink(svc.path)

    def test_rank_from_environment(self):
        from stoker import TorchIterableDataset
        svc = self.service(make_batches(2))
        with mock.patch.dict(os.environ, {"RANK": "1", "WORLD_SIZE": "2"}):
            ds = TorchIterableDataset(svc.path, job="envjob")
            it = iter(ds)
            next(it)
            it.close()
        self.assertEqual((svc.hellos[0]["rank"], svc.hellos[0]["world"], svc.hellos[0]["job"]), (1, 2, "envjob"))
        self.assertTrue(svc.wait_done())

    def test_state_round_trip(self):
        from stoker import TorchIterableDataset
        batches = make_batches(5)
        svc = self.service(batches)
        ds = TorchIterableDataset(svc.path, world_size=1, rank=0)
        it = iter(DataLoader(ds, batch_size=None))
        next(it), next(it)
        state = ds.state_dict()
        self.assertEqual(state["next_step"], 2)
        del it
        gc.collect()
        ds2 = TorchIterableDataset(svc.path, world_size=1, rank=0)
        ds2.load_state_dict(state)
        self.assertEqual(ds2.state_dict(), state)
        first = next(iter(DataLoader(ds2, batch_size=None)))
        self.assertBatchEqual(first, batches[2])
        self.assertEqual(svc.hellos[-1]["resume_step"], 2)
        self.assertEqual(svc.hellos[-1]["flags"] & 2, 2)

    def test_refuses_several_workers(self):
        from stoker import TorchIterableDataset
        ds = TorchIterableDataset("unused", world_size=1, rank=0)
        for workers in (1, 2):
            with self.subTest(num_workers=workers):
                info = mock.Mock(num_workers=workers, id=0)
                with mock.patch("torch.utils.data.get_worker_info", return_value=info):
                    with self.assertRaisesRegex(StokerError, "num_workers=0") as cm:
                        iter(ds)
                self.assertIn(f"got num_workers={workers}", str(cm.exception))
                self.assertIn("main process", str(cm.exception))
                self.assertIsNone(ds.loader, "no loader was made")

    def test_a_dataloader_with_one_worker_is_refused(self):
        """Audit #6: with num_workers=1 the loader would live in the worker and the main process's
        state_dict() would stay at the start; the worker refuses and the DataLoader re-raises it."""
        from stoker import TorchIterableDataset
        svc = self.service(make_batches(3))
        ds = TorchIterableDataset(svc.path, world_size=1, rank=0)
        with self.assertRaises(StokerError) as cm:
            next(iter(DataLoader(ds, batch_size=None, num_workers=1)))
        self.assertIn("num_workers=0", str(cm.exception))
        self.assertIn("main process", str(cm.exception))
        self.assertEqual(svc.hellos, [], "the worker never connected")
        self.assertIsNone(ds.loader)
        state = ds.state_dict()
        self.assertEqual((state["fingerprint"], state["epoch"], state["position"]), (0, 0, 0))

    def test_state_without_fingerprint_is_refused(self):
        from stoker import TorchIterableDataset
        svc = self.service(make_batches(4))
        ds = TorchIterableDataset(svc.path, world_size=1, rank=0)
        for epoch, position in ((0, 2), (1, 0)):
            with self.subTest(epoch=epoch, position=position):
                bad = {"job": "default", "rank": 0, "world_size": 1, "fingerprint": 0, "epoch": epoch,
                       "position": position, "next_step": 2}
                with self.assertRaises(ValueError) as cm:
                    ds.load_state_dict(bad)
                self.assertIn("fingerprint is 0", str(cm.exception))
                self.assertIn("cannot be checked", str(cm.exception))
                self.assertEqual(ds.state_dict()["position"], 0, "nothing was loaded")
        # the start (what a fresh dataset reports) still loads, and resumes at the first batch
        ds.load_state_dict(ds.state_dict())
        first = next(iter(DataLoader(ds, batch_size=None)))
        self.assertEqual(ds.loader.last_meta.global_step, 0)
        del first
        self.assertEqual(len(svc.hellos), 1)


if __name__ == "__main__":
    unittest.main()
