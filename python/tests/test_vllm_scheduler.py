"""The scheduler half of the vLLM connector, called as vLLM's v1 scheduler calls it (docs/vllm.md, the pinned release):
objects with the attributes vLLM's ``Request``, ``KVCacheBlocks`` and ``KVConnectorOutput`` have, no vLLM."""

from __future__ import annotations

import dataclasses
import enum
import pickle
import unittest
from typing import Any, Dict, List, Optional

from types import SimpleNamespace

from orbitkv_pd.vllm_scheduler import (DecodeReady, OrbitKVPdMetadata, PrefillCompleted, RequestEnded, SaveChunk, SchedulerSide,
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
    """What ./orbitkv-pd proxy sends (KvTransferParams.forPrefill / forDecode): vLLM's P/D form plus the admitted id."""
    return {"request_id": rid, "do_remote_decode": role == "prefill", "do_remote_prefill": role == "decode",
            "prefill_engine_id": "prefill-0", "decode_engine_id": "decode-0"}


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
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-5", 32, {"do_remote_decode": False, "do_remote_prefill": False}), 0),
                         (0, False))
        self.assertEqual(s.get_num_new_matched_tokens(Request("v-6", 32, orbitkv("req-6", "prefill")), 0), (0, False))
        s.update_state_after_alloc(Request("v-4", 32), Blocks([1, 2]), 0)
        self.assertTrue(s.build_connector_meta(None).empty())

    def test_a_decode_aborted_while_its_kv_loads_is_reported_held(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-7", 20, orbitkv("req-7", "decode"))
        s.get_num_new_matched_tokens(r, 0)
        s.update_state_after_alloc(r, Blocks([5, 6]), 20)
        s.build_connector_meta(None)
        r.status = Status.FINISHED_ABORTED
        # a push may be writing into its blocks: vLLM itself keeps them until the request is reported finished receiving
        # (the worker half does so once the handoff ended), so the connector asks for no delay
        self.assertEqual(s.request_finished(r, [5, 6]), (False, None))
        self.assertEqual(s.build_connector_meta(None).ended,
                         [RequestEnded("req-7", "v-7", "decode", 0, False, "FINISHED_ABORTED", held=True)])
        self.assertEqual((s.loading(), s.sending()), ({}, {}))
        self.assertFalse(s.outstanding())

    def test_a_decode_aborted_after_its_kv_landed_frees_its_blocks_at_once(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-13", 20, orbitkv("req-13", "decode"))
        s.update_state_after_alloc(r, Blocks([5, 6]), 20)
        s.update_connector_output(Output(recving={"v-13"}))
        r.status = Status.FINISHED_ABORTED
        self.assertEqual(s.request_finished(r, [5, 6]), (False, None))
        self.assertEqual(s.build_connector_meta(None).ended[0].held, False)

    def test_too_few_blocks_for_the_prompt_fail_the_load_not_the_engine(self) -> None:
        s = SchedulerSide(block_size=16)
        with self.assertLogs("orbitkv_pd.vllm", "ERROR") as logs:
            s.update_state_after_alloc(Request("v-8", 20, orbitkv("req-8", "decode")), Blocks([1]), 20)
        self.assertIn("request v-8: 1 blocks allocated for a prompt of 20 tokens", logs.output[0])
        meta = s.build_connector_meta(None)
        self.assertEqual((meta.decode_ready, meta.refused), ([], [("v-8", (1,))]), "reported as a load error of its blocks")

    def test_a_preempted_decode_is_announced_once_and_then_computes_its_prompt_itself(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-15", 40, orbitkv("req-15", "decode"))
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (40, True))
        s.update_state_after_alloc(r, Blocks([1, 2, 3]), 40)
        s.update_connector_output(Output(recving={"v-15"}))
        # preempted: vLLM resets num_computed_tokens to 0 and asks again; the parameters were marked used
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (0, False))
        s.update_state_after_alloc(r, Blocks([4, 5, 6]), 0)
        self.assertEqual(len(s.build_connector_meta(None).decode_ready), 1)
        r.status, r.output_token_ids = Status.FINISHED_LENGTH_CAPPED, [1, 2]
        self.assertEqual(s.request_finished(r, [4, 5, 6]), (False, None))
        self.assertEqual(s.build_connector_meta(None).ended, [RequestEnded("req-15", "v-15", "decode", 2, True, "FINISHED_LENGTH_CAPPED")],
                         "its end is still reported")

    def test_no_call_raises_on_parameters_it_cannot_take(self) -> None:
        # vLLM calls these inside its scheduler's step: an exception there ends the engine and every request in it
        s = SchedulerSide(block_size=16)
        bad = Request("v-16", 20, {"do_remote_prefill": True})  # no request_id
        with self.assertLogs("orbitkv_pd.vllm", "ERROR"):
            self.assertEqual(s.get_num_new_matched_tokens(bad, 0), (0, False))
            s.update_state_after_alloc(bad, Blocks([1, 2]), 20)
            self.assertEqual(s.request_finished(bad, [1, 2]), (False, None))
        self.assertTrue(s.build_connector_meta(None).empty())


class PrefillSideTest(unittest.TestCase):

    def test_a_prefill_that_ended_whole_keeps_its_blocks_until_sent_and_names_the_handoff(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-9", 33, orbitkv("req-9", "prefill"))
        self.assertEqual(s.get_num_new_matched_tokens(r, 0), (0, False))
        r.output_token_ids = [4242]
        r.status = Status.FINISHED_LENGTH_CAPPED  # max_tokens 1
        delay, params = s.request_finished(r, [11, 12, 13, 99])
        self.assertTrue(delay)
        self.assertEqual(params, {"request_id": "req-9", "do_remote_prefill": True, "do_remote_decode": False,
                                  "remote_block_ids": [11, 12, 13]})
        done = s.build_connector_meta(None).prefill_completed
        self.assertEqual([dataclasses.replace(f, c1_us=0) for f in done], [PrefillCompleted("req-9", "v-9", (11, 12, 13), 33, 4242)])
        self.assertGreater(done[0].c1_us, 0, "the fact's compute-end mark")
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

    def test_the_steps_chunks_of_a_prefill_go_to_the_worker_to_report_layer_by_layer(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-14", 40, orbitkv("req-14", "prefill"))
        s.get_num_new_matched_tokens(r, 16)  # one block cached locally
        s.update_state_after_alloc(r, Blocks([1, 2, 3]), 0)
        first = SimpleNamespace(num_scheduled_tokens={"v-14": 16, "other": 1},
                                scheduled_new_reqs=[SimpleNamespace(req_id="v-14", num_computed_tokens=16)])
        self.assertEqual(s.build_connector_meta(first).saving, [SaveChunk("req-14", "v-14", (1, 2, 3), 40, 16, 32)])
        self.assertEqual(s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"v-14": 16})).saving,
                         [SaveChunk("req-14", "v-14", (1, 2, 3), 40, 32, 40)], "the last chunk ends at the prompt")
        self.assertEqual(s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"v-14": 1})).saving, [], "decoding: nothing")

    def test_a_chunked_prefill_is_reported_once_every_page_is_allocated(self) -> None:
        # vLLM allocates a prefill's blocks chunk by chunk; the worker's first report must name all of them
        s = SchedulerSide(block_size=16)
        r = Request("v-17", 40, orbitkv("req-17", "prefill"))
        s.update_state_after_alloc(r, Blocks([1]), 0)
        first = SimpleNamespace(num_scheduled_tokens={"v-17": 16}, scheduled_new_reqs=[SimpleNamespace(req_id="v-17", num_computed_tokens=0)])
        self.assertEqual(s.build_connector_meta(first).saving, [], "2 of 3 pages not allocated yet")
        second = SimpleNamespace(num_scheduled_tokens={"v-17": 24},
                                 scheduled_cached_reqs=SimpleNamespace(req_ids=["v-17"], new_block_ids=[([2, 3],)]))
        self.assertEqual(s.build_connector_meta(second).saving, [SaveChunk("req-17", "v-17", (1, 2, 3), 40, 16, 40)])

    def test_a_prefill_preempted_after_its_pages_were_reported_is_reported_failed(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-18", 32, orbitkv("req-18", "prefill"))
        s.update_state_after_alloc(r, Blocks([1, 2]), 0)
        s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"v-18": 16}))
        s.update_state_after_alloc(r, Blocks([7, 8]), 0)  # allocated again after a preemption: the pages it named are gone
        self.assertEqual(s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"v-18": 32})).ended,
                         [RequestEnded("req-18", "v-18", "prefill", 0, False, "PREEMPTED")])
        r.status = Status.FINISHED_LENGTH_CAPPED
        self.assertEqual(s.request_finished(r, [7, 8]), (False, None), "abandoned: no prefill reported")
        self.assertTrue(s.build_connector_meta(None).empty())

    def test_vllm_keeps_stepping_while_blocks_wait_for_a_release(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-19", 16, orbitkv("req-19", "prefill"))
        s.update_state_after_alloc(r, Blocks([1]), 0)
        r.status, r.output_token_ids = Status.FINISHED_LENGTH_CAPPED, [5]
        s.request_finished(r, [1])
        s.build_connector_meta(None)
        self.assertTrue(s.has_pending_push_work())
        s.update_connector_output(Output(sending={"v-19"}))
        self.assertFalse(s.has_pending_push_work())

    def test_the_metadata_pickles_for_the_workers(self) -> None:
        s = SchedulerSide(block_size=16)
        r = Request("v-12", 16, orbitkv("req-12", "decode"))
        s.update_state_after_alloc(r, Blocks([3]), 16)
        meta = s.build_connector_meta(None)
        self.assertEqual(pickle.loads(pickle.dumps(meta)), meta)
        self.assertIsInstance(meta, OrbitKVPdMetadata)


class HandoffParamsTest(unittest.TestCase):

    def test_malformed_params_are_refused_naming_the_field(self) -> None:
        for params, field in (("x", "kv_transfer_params: an object"),
                              ({"do_remote_prefill": "yes"}, "kv_transfer_params.do_remote_prefill: true or false"),
                              # vLLM's toy proxy for the NIXL connector sends no admitted id
                              ({"do_remote_decode": True, "remote_engine_id": None}, "kv_transfer_params.request_id: the id"),
                              ({"request_id": "r", "do_remote_decode": True, "do_remote_prefill": True}, "both true")):
            with self.assertRaisesRegex(ValueError, field):
                handoff(Request("v", 1, params))
        self.assertIsNone(handoff(Request("v", 1, None)))
        self.assertEqual(handoff(Request("v", 1, orbitkv("r", "decode"))), {"request_id": "r", "role": "decode"})

    def test_a_block_size_must_be_positive(self) -> None:
        with self.assertRaisesRegex(ValueError, "block_size"):
            SchedulerSide(0)


if __name__ == "__main__":
    unittest.main()
