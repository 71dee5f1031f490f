"""The scheduler half of the vLLM connector, called as vLLM's v1 scheduler calls it (docs/vllm.md, the pinned release):
objects with the attributes vLLM's ``Request``, ``KVCacheBlocks`` and ``KVConnectorOutput`` have, no vLLM."""

from __future__ import annotations

import enum
import pickle
import unittest
from typing import Any, Dict, List, Optional

from orbitkv_pd.vllm_scheduler import (DecodeReady, OrbitKVPdMetadata, PrefillCompleted, RequestEnded, SchedulerSide,
                                       handoff)


class Status(enum.Enum):  # the names of vLLM's RequestStatus that matter here
    WAITING = 0
    WAITING_FOR_REMOTE_KVS = 1
    RUNNING = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH_CAPPED = 4
    FINISHED_ABORTED = 5


class Request:
    def __init__(self, rid: str, prompt: int, params: Optional[Dict[str, Any]] = None) -> None:
        self.request_id = rid
        self.prompt_token_ids = list(range(prompt))
        self.kv_transfer_params = params
        self.output_token_ids: List[int] = []
        self.status = Status.WAITING


class Blocks:  # KVCacheBlocks: get_block_ids() → one list per KV-cache group
    def __init__(self, ids: List[int]) -> None:
        self.ids = ids

    def get_block_ids(self):
        return (list(self.ids),)


class Output:  # KVConnectorOutput
    def __init__(self, recving=None, sending=None) -> None:
        self.finished_recving = recving
        self.finished_sending = sending


def orbitkv(rid: str, role: str) -> Dict[str, Any]:
    return {"orbitkv": {"request_id": rid, "role": role}}


class DecodeSideTest(unittest.TestCase):

    def test_a_decode_requests_prompt_arrives_asynchronously_and_its_pages_become_decode_ready(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-1", 40, orbitkv("req-1", "decode"))
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (40, True))
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (40, True), "asked again after a failed allocation: the same")
        s.update_state_after_alloc(r, Blocks([7, 8, 9, 10]), 40)
        meta = s.build_connector_meta(None)
        self.assertEqual(meta.decode_ready, [DecodeReady("req-1", "v-1", (7, 8, 9), 40, 0)])
        self.assertTrue(s.build_connector_meta(None).empty(), "each fact goes once")
        self.assertEqual(s.loading(), {"v-1": "req-1"})
        # the load finished: vLLM calls again with 0 external tokens; nothing new
        s.update_state_after_alloc(r, Blocks([7, 8, 9, 10]), 0)
        s.update_connector_output(Output(recving={"v-1"}))
        self.assertEqual(s.loading(), {})
        self.assertTrue(s.build_connector_meta(None).empty())

    def test_a_local_prefix_hit_is_not_pushed_again(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-2", 50, orbitkv("req-2", "decode"))
        self.assertEqual(s.get_num_new_matched_tokens(r, 32), (18, True))  # 2 blocks cached locally
        s.update_state_after_alloc(r, Blocks([1, 2, 3, 4]), 18)
        self.assertEqual(s.build_connector_meta(None).decode_ready, [DecodeReady("req-2", "v-2", (1, 2, 3, 4), 50, 2)])

    def test_a_whole_prompt_cached_locally_or_a_request_without_handoff_is_vllms_alone(self) -> None:
        s = SchedulerSide(block_size=16)
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-3", 32, orbitkv("req-3", "decode")), 32), (0, False))
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-4", 32), 0), (0, False))
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-5", 32, {"do_remote_decode": True}), 0), (0, False))
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-6", 32, orbitkv("req-6", "prefill")), 0), (0, False))
        s.update_state_after_alloc(Request("v-4", 32), Blocks([1, 2]), 0)
        self.assertTrue(s.build_connector_meta(None).empty())

    def test_a_decode_aborted_while_its_kv_loads_is_reported_ended(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-7", 20, orbitkv("req-7", "decode"))
        s.get_num_new_matched_tokens(r, 0)
        s.update_state_after_alloc(r, Blocks([5, 6]), 20)
        s.build_connector_meta(None)
        r.status = Status.FINISHED_ABORTED
        self.assertEqual(s.request_finished(r, [5, 6]), (False, None))
        self.assertEqual(s.build_connector_meta(None).ended, [RequestEnded("req-7", "v-7", "decode", 0, False, "FINISHED_ABORTED")])
        self.assertEqual(s.loading(), {})

    def test_too_few_blocks_for_the_prompt_is_refused_naming_the_request(self) -> None:
        s = SchedulerSide(block_size=16)
        with self.assertRaisesRegex(ValueError, "request v-8: 1 blocks allocated for a prompt of 20 tokens"):
            s.update_state_after_alloc(Request("v-8", 20, orbitkv("req-8", "decode")), Blocks([1]), 20)


class PrefillSideTest(unittest.TestCase):

    def test_a_prefill_that_ended_whole_keeps_its_blocks_until_sent_and_names_the_handoff(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-9", 33, orbitkv("req-9", "prefill"))
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (0, False))
        r.output_token_ids = [4242]
        r.status = Status.FINISHED_LENGTH_CAPPED  # max_tokens 1
        delay, params = s.request_finished(r, [11, 12, 13, 99])
        self.assertTrue(delay)
        self.assertEqual(params, {"orbitkv": {"request_id": "req-9", "role": "prefill", "prefill_done": True}})
        self.assertEqual(s.build_connector_meta(None).prefill_completed, [PrefillCompleted("req-9", "v-9", (11, 12, 13), 33, 4242)])
        self.assertEqual(s.sending(), {"v-9": "req-9"})
        s.update_connector_output(Output(sending={"v-9"}))  # the release decision came: vLLM frees the blocks
        self.assertEqual(s.sending(), {})

    def test_a_prefill_that_did_not_end_whole_reports_no_kv_and_keeps_nothing(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-10", 16, orbitkv("req-10", "prefill"))
        r.status = Status.FINISHED_ABORTED
        self.assertEqual(s.request_finished(r, [1]), (False, None))
        meta = s.build_connector_meta(None)
        self.assertEqual(meta.prefill_completed, [])
        self.assertEqual(meta.ended, [RequestEnded("req-10", "v-10", "prefill", 0, False, "FINISHED_ABORTED")])
        self.assertEqual(s.request_finished(Request("v-11", 16), [1]), (False, None), "not a handoff: vLLM's own")

    def test_the_metadata_pickles_for_the_workers(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-12", 16, orbitkv("req-12", "decode"))
        s.update_state_after_alloc(r, Blocks([3]), 16)
        meta = s.build_connector_meta(None)
        self.assertEqual(pickle.loads(pickle.dumps(meta)), meta)
        self.assertIsInstance(meta, OrbitKVPdMetadata)


class HandoffParamsTest(unittest.TestCase):

    def test_malformed_orbitkv_params_are_refused_naming_the_field(self) -> None:
        for params, field in (({"orbitkv": "x"}, "kv_transfer_params.orbitkv: an object"),
                              ({"orbitkv": {"role": "decode"}}, "kv_transfer_params.orbitkv.request_id"),
                              ({"orbitkv": {"request_id": "r", "role": "both"}}, "kv_transfer_params.orbitkv.role")):
            with self.assertRaisesRegex(ValueError, field):
                handoff(Request("v", 1, params))
        self.assertIsNone(handoff(Request("v", 1, None)))

    def test_a_block_size_must_be_positive(self) -> None:
        with self.assertRaisesRegex(ValueError, "block_size"):
            SchedulerSide(0)


if __name__ == "__main__":
    unittest.main()
