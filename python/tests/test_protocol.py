import json
import socket
import struct
import unittest

from orbitkv_pd import protocol as p
from orbitkv_pd.protocol import ApiError, Decision, Layout, Registration, ShmPool, CudaIpcPool, CudaIpcRegion


class ProtocolTest(unittest.TestCase):

    def test_a_frame_is_a_big_endian_length_and_one_json_object(self) -> None:
        a, b = socket.socketpair()
        with a, b:
            a.sendall(p.encode({"op": "ping", "id": 1, "text": "naïve"}))
            raw = p.encode({"op": "x"})
            self.assertEqual(struct.unpack(">I", raw[:4])[0], len(raw) - 4)
            self.assertEqual(p.read_frame(b), {"op": "ping", "id": 1, "text": "naïve"})
            a.close()
            self.assertIsNone(p.read_frame(b), "a clean end between frames")

    def test_broken_frames_are_errors_that_end_the_stream(self) -> None:
        for data, code in [(struct.pack(">I", 0), p.BAD_FRAME), (struct.pack(">I", 5) + b"{nope", p.BAD_FRAME),
                           (struct.pack(">I", 2) + b"[]", p.BAD_FRAME), (struct.pack(">I", 64 << 20), p.TOO_LARGE)]:
            a, b = socket.socketpair()
            with a, b:
                a.sendall(data)
                with self.assertRaises(ApiError) as e:
                    p.read_frame(b)
                self.assertEqual(e.exception.code, code)
                self.assertTrue(e.exception.fatal)
        a, b = socket.socketpair()
        with a, b:
            a.sendall(struct.pack(">I", 10) + b"{}")
            a.close()
            with self.assertRaises(p.ConnectionClosed):
                p.read_frame(b)

    def test_the_hello_carries_the_layout_and_the_pool(self) -> None:
        layout = Layout(num_layers=32, num_blocks=1024)
        self.assertEqual(layout.page, 16 * 8 * 128 * 2)
        self.assertEqual(layout.region_count, 64)
        self.assertEqual(Layout(num_layers=2, num_blocks=4, kv_split="fused").page, 2 * 16 * 8 * 128 * 2)
        h = Registration("decode-0", 7, "decode", layout, ShmPool("/dev/shm/d.kv"), "m", "http://h:1").hello(
            {"session": "s", "after_seq": 3})
        self.assertEqual(h["op"], "hello")
        self.assertEqual(h["version"], 1)
        self.assertEqual(h["layout"]["page_bytes"], 32768)
        self.assertEqual(h["pool"], {"kind": "shm", "path": "/dev/shm/d.kv"})
        self.assertEqual(h["resume"], {"session": "s", "after_seq": 3})
        self.assertNotIn("block_hash", h)
        hashed = Registration("decode-0", 7, "decode", layout, block_hash=("sha256_cbor", "orbitkv")).hello()
        self.assertEqual(hashed["block_hash"], {"algorithm": "sha256_cbor", "seed": "orbitkv"})
        cuda = CudaIpcPool([CudaIpcRegion(0, "K", 4096, b"\x01" * 64)], device=1).to_json()
        self.assertEqual(cuda["regions"][0]["ipc_handle"], "AQEB" * 21 + "AQ==")
        json.dumps(h)

    def test_decisions_expose_their_fields_blocks_and_marks(self) -> None:
        d = Decision.from_frame({"op": "decision", "seq": 4, "decision_id": "r/1", "request_id": "r", "kind": "release",
                                 "side": "decode", "blocks": [[3, 2], [9, 1]], "reason": "done", "timing": "in=5,out=9",
                                 "worker_us": 11}, 12)
        self.assertEqual(d.blocks(), [3, 4, 9])
        self.assertEqual(d.fields["side"], "decode")
        self.assertEqual(d.marks(), {"in": 5, "out": 9})
        self.assertEqual((d.worker_us, d.received_us), (11, 12))
        self.assertEqual(p.timing({"in": 1, "c0": 2}), "in=1,c0=2")


if __name__ == "__main__":
    unittest.main()
