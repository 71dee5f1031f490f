import os
import tempfile
import unittest

from orbitkv_pd import Layout
from orbitkv_pd import sim_model as sm
from orbitkv_pd.pool import ShmKvPool, file_bytes


class SimModelTest(unittest.TestCase):
    """The same values engine-sim's SimModelTest asserts for the Java model: both languages agree byte for byte."""

    model = sm.SimModel(42)

    def test_tokens_generation_and_kv_bytes_equal_the_java_models(self) -> None:
        t = sm.tokenize("Hello world, P/D disaggregation!")
        self.assertEqual(t, [9734, 20638, 2219, 22669, 13462, 17488, 4994, 862, 30563])
        self.assertEqual(self.model.generate(t, 5), [21709, 19241, 14529, 15933, 11599])
        self.assertEqual(sm.detokenize(self.model.generate(t, 5)), " biro lugetra dai dea brougi")
        self.assertEqual(sm.tokenize("naïve café — 東京 🚀 a\u00a0b\tc"), [8556, 20448, 5251, 739, 14481, 5660, 4558, 22469])
        h = self.model.prefix_hashes(t)
        self.assertEqual(self.model.slot(self.model.stream_seed(h[0], 0, 1), 44).hex(),
                         "54abb8f029a7be916b2f6671e22de7337ea32df2bcb32fd51527db727538547728bb86f30fbe9c183f3f4c74")
        self.assertEqual(self.model.slot(self.model.stream_seed(h[8], 1, 0), 44).hex(),
                         "ff0a754f7e53498fc08eabceb5d9102dd502e04deb47d8cbbe8616cd22cca369831a4b4c584a6b06949e81cb")

    def test_tokenization_chunks_words_as_the_java_tokenizer(self) -> None:
        self.assertEqual(len(sm.tokenize("The quick brown fox jumps")), 8)
        self.assertEqual(sm.tokenize(""), [])
        self.assertEqual(len(sm.tokenize("   ")), 1)

    def test_kv_written_at_some_blocks_verifies_when_copied_to_others_and_any_flipped_byte_is_caught(self) -> None:
        layout = Layout(num_layers=2, num_blocks=16, block_size_tokens=16, num_kv_heads=1, head_dim=22, dtype="bf16")
        prompt = sm.tokenize("the decode side verifies every page it received " * 4)
        n = sm.blocks_for(layout, len(prompt))
        with tempfile.TemporaryDirectory() as d:
            src_path, dst_path = os.path.join(d, "p.kv"), os.path.join(d, "d.kv")
            with ShmKvPool(layout, src_path) as src, ShmKvPool(layout, dst_path) as dst:
                self.assertEqual(os.path.getsize(src_path), file_bytes(layout))
                src_blocks, dst_blocks = list(range(2, 2 + n)), list(range(9, 9 + n))
                self.model.write_kv(src, src_blocks, prompt)
                for r in range(layout.region_count):
                    for s, t in zip(src_blocks, dst_blocks):
                        dst.write(r, t * layout.page, src.page(r, s))
                self.assertIsNone(self.model.verify_kv(dst, dst_blocks, prompt))
                self.assertIsNotNone(sm.SimModel(7).verify_kv(dst, dst_blocks, prompt))
                self.assertIsNotNone(self.model.verify_kv(dst, dst_blocks[1:] + dst_blocks[:1], prompt))
                page = bytearray(dst.page(3, dst_blocks[1]))
                page[17] ^= 0x10
                dst.write(3, dst_blocks[1] * layout.page, bytes(page))
                why = self.model.verify_kv(dst, dst_blocks, prompt)
                self.assertIsNotNone(why)
                self.assertIn(f"in block {dst_blocks[1]} (layer 1 V)", why)

    def test_a_pool_file_of_another_size_is_refused(self) -> None:
        layout = Layout(num_layers=1, num_blocks=4)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.kv")
            with open(path, "wb") as f:
                f.write(b"\0" * 100)
            with self.assertRaisesRegex(ValueError, "is 100 bytes but this layout needs"):
                ShmKvPool(layout, path)


if __name__ == "__main__":
    unittest.main()
