"""The engine model in Python: the hand-worked cases of the Java StepSchedulerTest, and the cross-language golden file
(engine-sim/src/test/resources/engine-model/golden.json, written by the Java EngineModelGoldenTest): the same arrivals
must give the same steps, batches and times in both languages."""

import json
import os
import unittest

from orbitkv_pd.engine_model import (BOTH, DECODE, FINISHED, FIRST_TOKEN, PREFILL, TOKEN, Chunk, CostModel, Limits, Request,
                                     StepScheduler, block_cbor, block_hashes, simulate)

COSTS = CostModel(1_000_000, 10_000, 1_000, 100_000, 1_000)
RESOURCES = os.path.join(os.path.dirname(__file__), "..", "..", "engine-sim", "src", "test", "resources", "engine-model")
GOLDEN = os.path.join(RESOURCES, "golden.json")


class StepSchedulerTest(unittest.TestCase):

    def test_decodes_go_first_and_prefill_chunks_fill_the_token_budget(self) -> None:
        s = StepScheduler(BOTH, Limits(8, 4, 4, 100), COSTS)
        s.add(Request("a", 3, 3))
        s.add(Request("b", 10, 2))
        p1 = s.plan()
        self.assertEqual(p1.prefills, (Chunk("a", 0, 3), Chunk("b", 0, 5)))
        self.assertEqual(p1.duration_ps, 1_000_000 + 8 * 10_000 + 21 * 1_000)
        self.assertEqual(s.complete(p1), [("a", FIRST_TOKEN)])
        p2 = s.plan()
        self.assertEqual(p2.decodes, ("a",))
        self.assertEqual(p2.prefills, (Chunk("b", 5, 5),))
        self.assertEqual(p2.duration_ps, 1_000_000 + 5 * 10_000 + 40 * 1_000 + 100_000 + 4 * 1_000)
        self.assertEqual(s.complete(p2), [("a", TOKEN), ("b", FIRST_TOKEN)])
        self.assertEqual(s.complete(s.plan()), [("a", FINISHED), ("b", FINISHED)])
        self.assertIsNone(s.plan())
        self.assertEqual(s.blocks_used, 0)

    def test_a_request_that_does_not_fit_waits_and_so_does_every_one_behind_it(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 8, 4, 6), COSTS)
        for r in (Request("a", 8, 8), Request("b", 8, 8), Request("c", 2, 2)):
            s.add(r)
        p = s.plan()
        self.assertEqual([c.id for c in p.prefills], ["a"])
        s.complete(p)
        self.assertEqual((s.waiting_count, s.blocks_used), (2, 4))
        for _ in range(7):
            s.complete(s.plan())
        self.assertEqual(s.blocks_used, 0)
        self.assertEqual([c.id for c in s.plan().prefills], ["b", "c"])

    def test_a_prefill_engine_lets_go_at_the_first_token_and_a_decode_engine_starts_from_the_second(self) -> None:
        arrivals = [(0, Request("a", 4, 3)), (0, Request("b", 4, 1))]
        steps, events = simulate(PREFILL, Limits(64, 8, 4, 100), COSTS, arrivals)
        self.assertEqual(len(steps), 1)
        self.assertEqual([(i, k) for _, i, k in events], [("a", FIRST_TOKEN), ("a", FINISHED), ("b", FIRST_TOKEN), ("b", FINISHED)])
        steps, events = simulate(DECODE, Limits(64, 8, 4, 100), COSTS, arrivals)
        self.assertEqual(len(steps), 2)
        self.assertEqual([(i, k) for _, i, k in events], [("a", TOKEN), ("a", FINISHED)])


class GoldenTest(unittest.TestCase):
    """The scenarios of the golden file give, in Python, exactly the steps and events recorded from the Java model."""

    def test_every_scenario_gives_the_recorded_steps_and_token_times(self) -> None:
        with open(GOLDEN, encoding="utf-8") as f:
            root = json.load(f)
        self.assertGreaterEqual(len(root["scenarios"]), 4)
        for sc in root["scenarios"]:
            lim = sc["limits"]
            c = sc["costs"]
            arrivals = [(a[0], Request(a[1], a[2], a[3], a[4])) for a in sc["arrivals"]]
            steps, events = simulate(sc["role"], Limits(lim["max_batched_tokens"], lim["max_num_seqs"], lim["block_tokens"], lim["num_blocks"]),
                                     CostModel(c["fixed_ps"], c["prefill_token_ps"], c["prefill_pair_ps"], c["decode_seq_ps"], c["kv_token_ps"]),
                                     arrivals)
            got_steps = [[s.start_us, s.duration_us, list(s.decodes), [[x.id, x.start, x.tokens] for x in s.prefills], s.running, s.waiting,
                          s.blocks_used] for s in steps]
            got_events = [[t, i, k] for t, i, k in events]
            self.assertEqual(got_steps, sc["steps"], sc["name"])
            self.assertEqual(got_events, sc["events"], sc["name"])


class BlockHashesTest(unittest.TestCase):
    """Block hashes byte by byte (vLLM's sha256_cbor over [parent, [token ids], extra keys or null]), and the vectors the
    Java BlockHashesTest wrote."""

    def test_the_cbor_is_canonical_and_worked_by_hand(self) -> None:
        self.assertEqual(block_cbor(b"\x00", [1, 2], None).hex(), "834100820102f6")
        self.assertEqual(block_cbor(b"\x00", [23, 24, 1000, 100_000], ["lora-a"]).hex(),
                         "834100" + "84" + "17" + "1818" + "1903e8" + "1a000186a0" + "81" + "666c6f72612d61")

    def test_the_golden_vectors_hold(self) -> None:
        with open(os.path.join(RESOURCES, "block-hashes.json"), encoding="utf-8") as f:
            vectors = json.load(f)["vectors"]
        self.assertGreaterEqual(len(vectors), 6)
        for v in vectors:
            got = [h.hex() for h in block_hashes(v["seed"], v["block_tokens"], v["tokens"], v["extra_keys"])]
            self.assertEqual(got, v["hashes"])


if __name__ == "__main__":
    unittest.main()
