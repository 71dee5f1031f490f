"""The engine model in Python: the hand-worked cases of the Java StepSchedulerTest, and the cross-language golden file
(engine-sim/src/test/resources/engine-model/golden.json, written by the Java EngineModelGoldenTest): the same arrivals
must give the same steps, batches and times in both languages."""

import json
import os
import unittest

from orbitkv_pd.engine_model import (BOTH, COSTS as NAMED_COSTS, DECODE, FINISHED, FIRST_TOKEN, LLAMA_8B_H100, LLAMA_70B_TP4, PREFILL,
                                     TINY, TOKEN, Chunk, CostModel, Limits, PrefixCache, Request, StepScheduler, block_cbor,
                                     block_hashes, cached_tokens, per_token_costs, simulate)

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


class PartsTest(unittest.TestCase):
    """A request names the part of its work the engine does; without one, the engine's role (the golden test holds that
    default to the recorded steps)."""

    def test_a_both_engine_runs_a_prefill_part_a_decode_part_and_a_whole_request_in_the_same_steps(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 8, 4, 100), COSTS)
        self.assertTrue(s.add(Request("p", 8, 5), PREFILL))
        self.assertTrue(s.add(Request("d", 8, 3), DECODE))
        self.assertTrue(s.add(Request("b", 4, 2)))
        p1 = s.plan()
        self.assertEqual(p1.decodes, ("d",))  # arrived with its prompt computed and its first token out
        self.assertEqual(p1.prefills, (Chunk("p", 0, 8), Chunk("b", 0, 4)))
        self.assertEqual(s.complete(p1), [("p", FIRST_TOKEN), ("p", FINISHED), ("d", TOKEN), ("b", FIRST_TOKEN)])
        # the prefill part held its prompt's blocks only, and let go at its first token
        self.assertEqual(s.blocks_used, 3 + 2)
        self.assertEqual(s.complete(s.plan()), [("d", FINISHED), ("b", FINISHED)])
        self.assertEqual((s.blocks_used, s.running_count, s.waiting_count), (0, 0, 0))

    def test_a_decode_part_of_one_token_is_not_queued_and_a_bad_part_is_refused(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 8, 4, 100), COSTS)
        self.assertFalse(s.add(Request("d", 8, 1), DECODE))
        self.assertIsNone(s.plan())
        with self.assertRaisesRegex(ValueError, "part"):
            s.add(Request("x", 8, 1), "sideways")

    def test_the_default_part_is_the_role(self) -> None:
        for role in (PREFILL, DECODE, BOTH):
            a, b = StepScheduler(role, Limits(6, 8, 4, 100), COSTS), StepScheduler(role, Limits(6, 8, 4, 100), COSTS)
            for r in (Request("x", 9, 3, 2), Request("y", 5, 1)):
                self.assertEqual(a.add(r), b.add(r, role))
            while True:
                pa, pb = a.plan(), b.plan()
                self.assertEqual(pa, pb)
                if pa is None:
                    break
                self.assertEqual(a.complete(pa), b.complete(pb))


class AbortTest(unittest.TestCase):

    def test_a_waiting_or_running_sequence_is_removed_and_a_running_ones_blocks_freed(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 1, 4, 100), COSTS)
        s.add(Request("a", 4, 4))
        s.add(Request("b", 4, 4))
        s.complete(s.plan())
        self.assertEqual((s.running_count, s.waiting_count, s.blocks_used), (1, 1, 2))
        self.assertTrue(s.abort("b"))
        self.assertEqual(s.waiting_count, 0)
        self.assertTrue(s.abort("a"))
        self.assertEqual((s.running_count, s.blocks_used), (0, 0))
        self.assertFalse(s.abort("a"))
        self.assertFalse(s.abort("never"))
        self.assertIsNone(s.plan())

    def test_an_abort_between_plan_and_complete_leaves_the_rest_of_the_plan_as_planned(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 8, 4, 100), COSTS)
        s.add(Request("a", 4, 3))
        s.add(Request("b", 4, 3))
        s.add(Request("c", 4, 3))
        p = s.plan()
        self.assertEqual([c.id for c in p.prefills], ["a", "b", "c"])
        self.assertTrue(s.abort("b"))
        self.assertEqual(s.complete(p), [("a", FIRST_TOKEN), ("c", FIRST_TOKEN)])
        self.assertEqual((s.running_count, s.waiting_count, s.blocks_used), (2, 0, 4))
        p = s.plan()
        self.assertTrue(s.abort("a"))
        self.assertEqual(s.complete(p), [("c", TOKEN)])
        self.assertEqual(s.blocks_used, 2)

    def test_an_abort_lets_the_head_of_the_queue_in(self) -> None:
        s = StepScheduler(BOTH, Limits(64, 8, 4, 4), COSTS)
        s.add(Request("a", 8, 8))
        s.add(Request("b", 8, 8))
        s.complete(s.plan())
        self.assertEqual([c.id for c in s.plan().prefills], [])
        s.abort("a")
        self.assertEqual([c.id for c in s.plan().prefills], ["b"])


class PrefixCacheTest(unittest.TestCase):

    def test_a_lookup_counts_the_leading_hits_up_to_the_first_miss(self) -> None:
        c = PrefixCache(10)
        c.insert([b"a", b"b", b"c"])
        self.assertEqual(c.lookup([b"a", b"b", b"c", b"d"]), 3)
        self.assertEqual(c.lookup([b"a", b"x", b"c"]), 1)
        self.assertEqual(c.lookup([b"x", b"a"]), 0)
        self.assertEqual(c.lookup([]), 0)
        self.assertEqual(c.size, 3)

    def test_the_least_recently_used_goes_first_and_a_chain_loses_its_tail_before_its_head(self) -> None:
        c = PrefixCache(3)
        c.insert([b"a", b"b", b"c"])  # oldest to newest: c b a (a chain's head is its most recent block)
        c.insert([b"d"])  # c evicted: the chain's tail, not its head
        self.assertEqual(c.lookup([b"a", b"b", b"c"]), 2)  # the prefix still serves; now d b a
        c.insert([b"e"])  # d evicted: the least recently used
        self.assertEqual([c.lookup([h]) for h in (b"d", b"a", b"b", b"e")], [0, 1, 1, 1])
        self.assertEqual(c.size, 3)
        c.insert([b"f", b"g", b"h", b"i"])  # more than the capacity at once: the chain's head stays
        self.assertEqual([c.lookup([h]) for h in (b"f", b"g", b"h", b"i")], [1, 1, 1, 0])
        with self.assertRaises(ValueError):
            PrefixCache(0)

    def test_cached_tokens_never_spare_the_last_prompt_token(self) -> None:
        self.assertEqual(cached_tokens(2, 16, 40), 32)
        self.assertEqual(cached_tokens(2, 16, 32), 31)  # a full hit still computes the last token, for the first sample
        self.assertEqual(cached_tokens(0, 16, 40), 0)
        self.assertEqual(cached_tokens(1, 16, 1), 0)
        self.assertEqual(cached_tokens(3, 16, 0), 0)

    def test_block_hashes_of_a_shared_prefix_hit_up_to_where_the_prompts_part(self) -> None:
        c = PrefixCache(100)
        a = list(range(40))
        b = list(range(20)) + [999] * 20
        c.insert(block_hashes("s", 8, a))
        self.assertEqual(c.lookup(block_hashes("s", 8, b)), 2)
        self.assertEqual(c.lookup(block_hashes("other-seed", 8, a)), 0)


class CostsTest(unittest.TestCase):

    def test_named_cost_models_and_the_legacy_per_token_costs(self) -> None:
        self.assertEqual(NAMED_COSTS, {"llama-8b-h100": LLAMA_8B_H100, "llama-70b-tp4": LLAMA_70B_TP4, "tiny": TINY})
        c = per_token_costs(0.05, 2.0)
        self.assertEqual(c, CostModel(2_000_000_000, 50_000_000, 0, 0, 0))
        self.assertEqual(c.step_ps([Chunk("a", 0, 100)], 3, 500), 2_000_000_000 + 100 * 50_000_000)
        self.assertEqual(per_token_costs(0, 0), CostModel(0, 0, 0, 0, 0))
        self.assertEqual(per_token_costs(0.0000000004, 0.0000000006), CostModel(1, 0, 0, 0, 0))  # picoseconds, rounded
        self.assertEqual(per_token_costs(0, 0.0000000025).fixed_ps, 3)  # half up, as Java's Math.round


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
