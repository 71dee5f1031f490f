"""The connector against the recorded interface of the pinned vLLM release (orbitkv_pd.vllm_interface): what exists of
it must take exactly vLLM's parameters, and what vLLM declares abstract on a side must be there once that side is."""

from __future__ import annotations

import inspect
import unittest
from typing import Tuple

from orbitkv_pd import vllm_interface as vi
from orbitkv_pd.vllm import OrbitKVPdConnector
from orbitkv_pd.vllm_scheduler import SchedulerSide
from orbitkv_pd.vllm_worker import WorkerSide


def params(fn) -> Tuple[str, ...]:
    out = []
    for p in list(inspect.signature(fn).parameters.values())[1:]:  # self
        out.append("**" + p.name if p.kind is inspect.Parameter.VAR_KEYWORD else p.name)
    return tuple(out)


class SchedulerHalfContractTest(unittest.TestCase):

    def test_every_scheduler_call_it_has_takes_vllms_parameters(self) -> None:
        implemented = [n for n in vi.SCHEDULER if hasattr(SchedulerSide, n)]
        self.assertIn("request_finished", implemented)
        for name in implemented:
            with self.subTest(method=name):
                self.assertEqual(params(getattr(SchedulerSide, name)), vi.SCHEDULER[name].params,
                                 f"{name}: vLLM ({vi.PINNED_FILE} line {vi.SCHEDULER[name].line}) passes {vi.SCHEDULER[name].params}")

    def test_it_has_every_scheduler_call_vllm_declares_abstract(self) -> None:
        for name, m in vi.SCHEDULER.items():
            if m.abstract:
                with self.subTest(method=name):
                    self.assertTrue(callable(getattr(SchedulerSide, name, None)), f"{name} is abstract in vLLM (line {m.line})")

    def test_the_record_names_a_pinned_commit_and_no_method_twice(self) -> None:
        self.assertEqual(len(vi.PINNED_COMMIT), 40)
        self.assertFalse(set(vi.SCHEDULER) & set(vi.WORKER))
        self.assertEqual(vi.CONSTRUCTOR, ("vllm_config", "role", "kv_cache_config"))


class ConnectorContractTest(unittest.TestCase):
    """The class vLLM loads (``kv_connector_module_path`` orbitkv_pd.vllm) and the worker half behind it."""

    def test_the_constructor_takes_what_vllms_factory_passes(self) -> None:
        self.assertEqual(params(OrbitKVPdConnector.__init__), vi.CONSTRUCTOR)

    def test_every_method_it_defines_takes_vllms_parameters(self) -> None:
        for cls, side in ((OrbitKVPdConnector, {**vi.SCHEDULER, **vi.WORKER}), (WorkerSide, vi.WORKER)):
            implemented = [n for n in side if n in vars(cls)]
            self.assertIn("get_finished", implemented)
            for name in implemented:
                with self.subTest(cls=cls.__name__, method=name):
                    self.assertEqual(params(getattr(cls, name)), side[name].params,
                                     f"{name}: vLLM ({vi.PINNED_FILE} line {side[name].line}) passes {side[name].params}")

    def test_it_has_every_call_vllm_declares_abstract_on_both_sides(self) -> None:
        for cls, side in ((OrbitKVPdConnector, {**vi.SCHEDULER, **vi.WORKER}), (WorkerSide, vi.WORKER)):
            for name, m in side.items():
                if m.abstract:
                    with self.subTest(cls=cls.__name__, method=name):
                        self.assertIn(name, vars(cls), f"{name} is abstract in vLLM (line {m.line})")

    def test_the_calls_that_make_the_handoff_work_are_implemented_not_inherited(self) -> None:
        # vLLM's defaults for these do nothing (or keep nothing): without them a handoff would hang or leak blocks
        for name in ("register_kv_caches", "request_finished", "update_connector_output", "get_finished",
                     "get_block_ids_with_load_errors", "shutdown", "bind_connector_metadata", "has_pending_push_work"):
            self.assertIn(name, vars(OrbitKVPdConnector), name)


if __name__ == "__main__":
    unittest.main()
