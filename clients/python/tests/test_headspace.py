"""The Loader's headspace option: replayed copies of the first batches, asked of nobody, and the compute floor reported."""

import os
import sys
import time
import unittest
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import Loader, is_view_of_segment  # noqa: E402
from stoker import protocol as P  # noqa: E402
from fake_service import make_batches  # noqa: E402
from test_loader import ServiceTest  # noqa: E402

STEP_S = 0.02  # the simulated compute: a known sleep


class HeadspaceTest(ServiceTest):
    def run_trainer(self, loader, steps=None):
        """Iterates ``loader`` with a STEP_S sleep per step; returns the sample_index of each batch and the service's NEXT
        count seen at the start of each step."""
        got = []
        for batch in loader:
            got.append(loader.last_meta.sample_index.tolist())
            time.sleep(STEP_S)
            if steps is not None and len(got) == steps:
                break
        return got

    def test_replayed_steps_ask_the_service_nothing_and_the_floor_reaches_it(self):
        batches = make_batches(8)
        svc = self.service(batches)
        with Loader(svc.path, 0, 1, headspace=(3, 7)) as loader:
            seen, nexts = [], []
            for batch in loader:
                seen.append((loader.last_meta.sample_index.tolist(), {k: np.array(v) for k, v in batch.items()}))
                nexts.append(svc.kinds().count("NEXT"))
                time.sleep(STEP_S)
            self.assertTrue(svc.wait_for(lambda: svc.headspace))
        # 3 batches from the service, 7 replayed copies of them (round robin), then the other 5 from the service
        order = [i % 3 for i in range(7)]
        self.assertEqual([s for s, _ in seen], [batches[i]["sample_index"].tolist() for i in [0, 1, 2] + order + [3, 4, 5, 6, 7]])
        for (_, got), i in zip(seen[3:10], order):
            self.assertBatchEqual(got, batches[i])
        self.assertEqual(nexts[:10], [1, 2, 3] + [3] * 7, "no request while the copies were replayed")
        self.assertEqual(svc.kinds().count("NEXT"), 8 + 1, "the 8 batches and the request answered with END: none for the replay")
        self.assertEqual(loader.replayed, 7)
        self.assertEqual(loader.batches, 8)
        self.assertEqual(len(loader.replay_steps_ns), 7)
        self.assertGreaterEqual(min(loader.replay_steps_ns), STEP_S * 1e9, "each replayed step holds the trainer's sleep")
        self.assertGreaterEqual(loader.compute_floor_ns, STEP_S * 1e9)
        self.assertEqual(loader.compute_floor_ns, sorted(loader.replay_steps_ns)[3], "the median of 7")
        self.assertEqual(svc.headspace, [(0, loader.compute_floor_ns, 7)], "sent once, with the first request after the replay")
        self.assertTrue(loader.headspace_reported)
        # the replayed steps are not steps on the service's batches: 8 timings, as without the option
        self.assertEqual(len(svc.timings), 8)
        self.assertEqual(len(loader.timings()), 8)
        self.assertEqual(svc.violations, [])

    def test_the_timing_of_the_last_real_step_before_the_replay_is_sent_after_it(self):
        svc = self.service(make_batches(4))
        with Loader(svc.path, 0, 1, headspace=(2, 3)) as loader:
            self.run_trainer(loader)
        self.assertEqual([t[1:] for t in svc.timings], loader.timings(), "every real step's timing, in order, none of a replayed one")
        for _, _, step in svc.timings:
            self.assertGreaterEqual(step, STEP_S * 1e9)
            self.assertLess(step, 10 * 1e9, "a real step's compute, not the replay's time added to it")

    def test_shared_memory_copies_outlive_their_leases(self):
        batches = make_batches(6)
        svc = self.service(batches, delivery="shm")
        with Loader(svc.path, 0, 1, headspace=(2, 4)) as loader:
            got = []
            for batch in loader:
                if loader.replayed and len(got) < 4 and loader.batches == 2:
                    self.assertFalse(any(is_view_of_segment(v, loader) for v in batch.values()), "a private copy")
                    got.append((loader.replayed, batch))
                time.sleep(0.001)
            self.assertEqual(len(got), 4)
            for n, batch in got:
                self.assertBatchEqual(batch, batches[(n - 1) % 2])
        self.assertTrue(svc.wait_for(lambda: not svc.held), "every lease released")
        self.assertEqual(svc.violations, [])

    def test_state_dict_during_the_replay_stays_at_the_last_batch_from_the_service(self):
        svc = self.service(make_batches(6), steps_per_epoch=6)
        loader = Loader(svc.path, 0, 1, headspace=(2, 3))
        next(loader), next(loader)
        after_two = loader.state_dict()
        next(loader)  # a replayed copy of batch 0
        self.assertEqual(loader.last_meta.sample_index.tolist(), make_batches(6)[0]["sample_index"].tolist())
        self.assertEqual(loader.state_dict(), after_two)
        loader.close()

    def test_a_service_from_before_the_report_gets_none_and_the_trainer_is_warned(self):
        svc = self.service(make_batches(4), features=None)  # a 72-byte WELCOME: no features
        with Loader(svc.path, 0, 1, headspace=(1, 2)) as loader:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.run_trainer(loader)
            self.assertFalse(loader.welcome.takes_headspace)
            self.assertIsNotNone(loader.compute_floor_ns)
            self.assertFalse(loader.headspace_reported)
        self.assertTrue(any("does not take headspace reports" in str(w.message) for w in caught))
        self.assertEqual(svc.headspace, [])
        self.assertEqual(svc.violations, [], "no NEXT of a length it does not know")
        self.assertEqual(len(svc.timings), 4)

    def test_a_feed_that_ends_before_the_copies_are_made_replays_nothing(self):
        svc = self.service(make_batches(2))
        with Loader(svc.path, 0, 1, headspace=(3, 5)) as loader:
            self.assertEqual(len(self.run_trainer(loader)), 2)
            self.assertEqual(loader.replayed, 0)
            self.assertIsNone(loader.compute_floor_ns)
            self.assertIsNone(loader.headspace_figures())

    def test_figures_on_the_trainer_side(self):
        loader = Loader("/nonexistent.sock", 0, 1, headspace=(1, 1))
        loader.waits.extend([(10, 90), (30, 70)])
        loader.replay_steps_ns = [60, 80, 70]
        loader._end_replay()
        f = loader.headspace_figures()
        self.assertEqual(f["compute_floor_ns"], 70)
        self.assertEqual(f["mean_step_ns"], 100)
        self.assertEqual(f["data_headroom_ns"], 30)
        self.assertAlmostEqual(f["wait_ratio"], 0.2)
        loader.replay_steps_ns = [150, 160]
        loader._end_replay()
        self.assertEqual(loader.compute_floor_ns, 155, "the median of an even count: the mean of the middle two")
        self.assertEqual(loader.headspace_figures()["data_headroom_ns"], 0, "a step at its floor has nothing to win")

    def test_bad_arguments(self):
        for bad in [(0, 5), (3, 0), (3,), 3, (True, 2), (2.0, 3), (10_000, 2)]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                Loader("/x.sock", 0, 1, headspace=bad)

    def test_next_request_payloads(self):
        self.assertEqual(len(P.next_request((1, 2))), 12 + 16)
        self.assertEqual(len(P.next_request((1, 2), (3, 4))), 12 + 32)
        with self.assertRaises(ValueError):
            P.next_request(None, (3, 4))
        with self.assertRaises(ValueError):
            P.next_request((1, 2), (3, 0))


if __name__ == "__main__":
    unittest.main()
