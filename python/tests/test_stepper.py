"""The simulated engine's step loop (sim_engine.Stepper): the engine model's scheduler in real time, its outcomes handed
to the requests waiting on them."""

import time
import unittest

from orbitkv_pd import engine_model as em
from orbitkv_pd.sim_engine import Stepper, StepperClosed


def stepper(decode_ms: float = 0.0, prefill_ms: float = 0.0, blocks: int = 100, role: str = em.BOTH) -> Stepper:
    return Stepper(role, em.Limits(64, 8, 4, blocks), em.per_token_costs(prefill_ms, decode_ms), "per-token", "t")


def drain(h, n: int) -> list:
    return [h.next() for _ in range(n)]


class StepperTest(unittest.TestCase):

    def test_a_whole_request_gets_its_first_token_then_one_outcome_per_step(self) -> None:
        s = stepper()
        try:
            h = s.submit("r", 6, 4, 0, em.BOTH)
            self.assertTrue(h.queued)
            self.assertEqual(drain(h, 4), [em.FIRST_TOKEN, em.TOKEN, em.TOKEN, em.FINISHED])
            st = s.stats()
            self.assertEqual((st["steps"], st["running"], st["waiting"], st["kv_blocks_used"]), (4, 0, 0, 0))
            self.assertEqual(st["mean_tokens_per_step"], (6 + 3) / 4)
        finally:
            s.close()

    def test_steps_take_the_cost_models_time_without_drifting(self) -> None:
        s = stepper(decode_ms=10)
        try:
            t0 = time.monotonic()
            h = s.submit("r", 4, 20, 0, em.BOTH)
            drain(h, 20)
            took = time.monotonic() - t0
            self.assertGreaterEqual(took, 20 * 0.010 - 0.002)
            self.assertLess(took, 20 * 0.010 + 0.15)  # deadlines follow each other: late wake-ups do not add up
            self.assertAlmostEqual(s.stats()["mean_step_ms"], 10.0)
        finally:
            s.close()

    def test_two_requests_share_steps(self) -> None:
        s = stepper(decode_ms=5)
        try:
            a = s.submit("a", 4, 10, 0, em.BOTH)
            b = s.submit("b", 4, 10, 0, em.BOTH)
            drain(a, 10)
            drain(b, 10)
            self.assertLessEqual(s.stats()["steps"], 11)  # 10 when b came before the first step was planned
        finally:
            s.close()

    def test_a_decode_part_of_one_token_is_not_queued(self) -> None:
        s = stepper()
        try:
            self.assertFalse(s.submit("d", 4, 1, 0, em.DECODE).queued)
            h = s.submit("d2", 4, 3, 0, em.DECODE)
            self.assertEqual(drain(h, 2), [em.TOKEN, em.FINISHED])
        finally:
            s.close()

    def test_an_aborted_request_frees_its_blocks_for_the_one_waiting(self) -> None:
        s = stepper(decode_ms=5, blocks=4)
        try:
            a = s.submit("a", 8, 8, 0, em.BOTH)  # the whole pool
            self.assertEqual(a.next(), em.FIRST_TOKEN)
            b = s.submit("b", 8, 8, 0, em.BOTH)
            self.assertEqual(s.stats()["waiting"], 1)
            self.assertTrue(s.abort("a"))
            self.assertFalse(s.abort("a"))
            self.assertEqual(drain(b, 8)[-1], em.FINISHED)
            self.assertEqual(s.stats()["kv_blocks_used"], 0)
        finally:
            s.close()

    def test_the_prefill_and_decode_of_one_request_are_apart(self) -> None:
        s = stepper()
        try:
            p = s.submit("r", 4, 5, 0, em.PREFILL)
            self.assertEqual(drain(p, 2), [em.FIRST_TOKEN, em.FINISHED])
            d = s.submit("r", 4, 5, 0, em.DECODE)
            self.assertFalse(p.abort())  # the finished prefill's handle leaves the decode alone
            self.assertEqual(drain(d, 4)[-1], em.FINISHED)
        finally:
            s.close()

    def test_a_request_larger_than_the_pool_is_refused_and_closing_wakes_the_waiting(self) -> None:
        s = stepper(decode_ms=1000, blocks=4)
        with self.assertRaisesRegex(ValueError, "needs 5 KV blocks"):
            s.submit("big", 8, 9, 0, em.BOTH)
        self.assertTrue(s.submit("p", 8, 100, 0, em.PREFILL).queued)  # a prefill holds its prompt only
        h = s.submit("r", 4, 2, 0, em.BOTH)
        s.close()
        with self.assertRaises(StepperClosed):
            h.next()
        with self.assertRaises(StepperClosed):
            s.submit("late", 4, 2, 0, em.BOTH)


if __name__ == "__main__":
    unittest.main()


class LayerProgressTest(unittest.TestCase):

    def test_a_prefill_step_reports_its_layers_in_turn_and_each_chunk_whole_at_its_end(self) -> None:
        # 4 layers, 2 reports a step; a 100-token prompt in chunks of 64 (Limits' token budget): two prefill steps
        s = Stepper(em.PREFILL, em.Limits(64, 8, 4, 100), em.per_token_costs(0.1, 0.0), "per-token", "t", num_layers=4, reports_per_step=2)
        heard = []
        try:
            h = s.submit("r", 100, 1, 0, em.PREFILL, on_layers=lambda done, end, layers: heard.append((done, end, layers)))
            self.assertEqual(h.next(), em.FIRST_TOKEN)
            self.assertEqual(heard, [(0, 64, 2), (64, 64, 4), (64, 100, 2), (100, 100, 4)])
            # a step without listeners reports nothing, and a stepper that reports never does
            s.submit("q", 10, 1, 0, em.PREFILL).next()
            self.assertEqual(len(heard), 4)
        finally:
            s.close()

    def test_a_short_step_reports_fewer_larger_groups_of_layers_at_least_the_interval_apart(self) -> None:
        # 32 layers, a report a layer at most, at least 10 ms apart: a 40 ms step (400 tokens at 0.1 ms) reports 4 times
        s = Stepper(em.PREFILL, em.Limits(1024, 8, 4, 200), em.per_token_costs(0.1, 0.0), "per-token", "t", num_layers=32,
                    reports_per_step=32, report_interval_s=0.01)
        heard = []
        try:
            s.submit("r", 400, 1, 0, em.PREFILL, on_layers=lambda done, end, layers: heard.append(layers)).next()
            self.assertEqual(heard, [8, 16, 24, 32])
        finally:
            s.close()

    def test_a_report_never_claims_a_layer_the_fill_has_not_written_and_only_ever_says_more(self) -> None:
        from orbitkv_pd.sim_engine import _ProgressReport

        class Client:
            def __init__(self) -> None:
                self.sent: list = []

            def prefill_progress(self, rid, blocks, num_tokens, done, chunk_end, layers) -> None:
                self.sent.append((blocks, done, chunk_end, layers))
        c = Client()
        r = _ProgressReport(c, "r", [4, 5], 20, 4)
        r.modelled(0, 20, 2)   # the model is ahead of the fill: nothing written yet, nothing said
        self.assertEqual(c.sent, [])
        r.filled(1)            # layer 0 written: 1 layer, and the first report names the pages
        r.modelled(0, 20, 3)   # still 1 written: the same claim, not sent again
        r.filled(4)            # the whole fill: the model's word stands
        r.modelled(0, 20, 1)   # an older step point (says less): not sent
        r.modelled(20, 20, 4)
        self.assertEqual(c.sent, [([4, 5], 0, 20, 1), (None, 0, 20, 3), (None, 20, 20, 4)])
