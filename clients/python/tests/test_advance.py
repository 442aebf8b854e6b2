"""Welcome.advance, the cursor a loader reports in state_dict() when no header gave one (audit #28):
arithmetic equal to walking the schedule one step at a time, and bounded work after 10^7 steps."""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from stoker import Loader  # noqa: E402
from stoker import protocol as P  # noqa: E402


def welcome(epoch, position, n, pps, next_step=0):
    return P.Welcome(P.VERSION, P.DELIVERY_COPY, 0, next_step, 1234, max(1, n // max(pps, 1)), epoch, position, n, pps)


def walk(epoch, position, n, pps, steps):
    """The schedule's rule, one step at a time (the implementation before audit #28), as the oracle."""
    if pps <= 0 or n <= 0:
        return epoch, position
    for _ in range(steps):
        position += pps
        if position + pps > n:
            epoch, position = epoch + 1, 0
    return epoch, position


class _LineBudget:
    """Counts the Python lines run in stoker's protocol module; more than ``limit`` fails the test."""

    def __init__(self, limit):
        self.limit, self.lines = limit, 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != P.__file__:
            return None
        if event == "line":
            self.lines += 1
            if self.lines > self.limit:
                raise AssertionError(f"advance ran more than {self.limit} lines: it walks the steps")
        return self

    def __enter__(self):
        sys.settrace(self)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        return False


class AdvanceTest(unittest.TestCase):
    def test_equals_the_step_by_step_walk_over_random_cases(self):
        rnd = random.Random(28)
        cases = 0
        for _ in range(20000):
            n = rnd.randint(1, 60)
            pps = rnd.choice([rnd.randint(1, 12), rnd.randint(1, 80)])  # also steps larger than an epoch
            # positions on the step grid and off it, and past the last whole step (a resized job's cursor)
            position = rnd.choice([rnd.randint(0, n // pps) * pps, rnd.randint(0, n + 5)])
            epoch = rnd.randint(0, 5)
            steps = rnd.choice([0, 1, 2, rnd.randint(0, 300)])
            w = welcome(epoch, position, n, pps)
            self.assertEqual(walk(epoch, position, n, pps, steps), w.advance(epoch, position, steps),
                             f"n={n} pps={pps} epoch={epoch} position={position} steps={steps}")
            cases += 1
        self.assertEqual(20000, cases)

    def test_degenerate_schedules_and_negative_steps_leave_the_cursor(self):
        for n, pps, steps in ((0, 4, 10), (10, 0, 10), (10, 4, 0), (10, 4, -3)):
            self.assertEqual((2, 4), welcome(2, 4, n, pps).advance(2, 4, steps))

    def test_ten_million_steps_cost_a_few_lines_not_ten_million(self):
        n, pps, steps = 1000, 24, 10 ** 7  # 41 steps an epoch
        w = welcome(0, 0, n, pps)
        with _LineBudget(100) as budget:
            got = w.advance(0, 0, steps)
        self.assertEqual((steps // 41, (steps % 41) * pps), got)
        self.assertLess(budget.lines, 100)
        # checked against the walk where the walk is cheap: the same rule a million steps in
        self.assertEqual(walk(0, 0, n, pps, 10 ** 6), w.advance(0, 0, 10 ** 6))

    def test_a_loaders_state_dict_after_ten_million_batches_is_cheap(self):
        loader = Loader("/nonexistent/stoker.sock", rank=0, world_size=2, job="j")
        loader._welcome = welcome(3, 48, 1000, 24, next_step=500)
        loader._yielded = 10 ** 7
        with _LineBudget(100):
            state = loader.state_dict()
        self.assertEqual(500 + 10 ** 7, state["next_step"])
        # 48 is step 2 of epoch 3: 39 more steps end it, then 41 a whole epoch
        rest = 10 ** 7 - 39
        self.assertEqual((3 + 1 + rest // 41, (rest % 41) * 24), (state["epoch"], state["position"]))
        self.assertEqual(1234, state["fingerprint"])


if __name__ == "__main__":
    unittest.main()
