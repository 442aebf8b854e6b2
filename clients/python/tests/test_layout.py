import os
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stoker import ProtocolError, read_batch  # noqa: E402
from fake_service import METADATA, make_batches, write_batch  # noqa: E402


def patched(data, fmt, offset, *values):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, *values)
    return bytes(b)


D0 = 64  # descriptor 0


class ReadBatchTest(unittest.TestCase):
    def setUp(self):
        self.tensors = make_batches(1)[0]
        self.data = write_batch(self.tensors, epoch=2, step=5, rank=1, world=4, samples=2, scheduled=3,
                                global_step=25)

    def test_round_trip_zero_copy(self):
        arrays, meta = read_batch(self.data)
        self.assertEqual(list(arrays), [k for k in self.tensors if k not in METADATA], "the model inputs only")
        for k, v in self.tensors.items():
            got = meta.metadata[k] if k in METADATA else arrays[k]
            np.testing.assert_array_equal(got, v)
            self.assertEqual(got.dtype, v.dtype)
        np.testing.assert_array_equal(meta.sample_index, self.tensors["sample_index"])
        self.assertIsNone(meta.pixel_norm)
        self.assertEqual((meta.epoch, meta.step, meta.rank, meta.world, meta.samples, meta.scheduled,
                          meta.global_step, meta.total_bytes), (2, 5, 1, 4, 2, 3, 25, len(self.data)))
        buf = np.frombuffer(bytearray(self.data), dtype=np.uint8)
        arrays, _ = read_batch(buf)
        base = buf.__array_interface__["data"][0]
        for a in arrays.values():
            addr = a.__array_interface__["data"][0]
            self.assertTrue(base <= addr and addr + a.nbytes <= base + buf.nbytes)

    def test_scalar_and_empty_tensors(self):
        t = {"scalar": np.array(7, dtype=np.int64), "empty": np.zeros((0, 1176), dtype=np.float32),
             "u8": np.arange(3, dtype=np.uint8)}
        arrays, _ = read_batch(write_batch(t, samples=0))
        self.assertEqual(arrays["scalar"].shape, ())
        self.assertEqual(int(arrays["scalar"]), 7)
        self.assertEqual(arrays["empty"].shape, (0, 1176))
        np.testing.assert_array_equal(arrays["u8"], [0, 1, 2])

    def assertMalformed(self, data, *fragments):
        with self.assertRaises(ProtocolError) as cm:
            read_batch(data)
        for f in fragments:
            self.assertIn(f, str(cm.exception))

    def test_resume_block(self):
        t = {"input_ids": np.arange(6, dtype=np.int64).reshape(2, 3)}
        data = write_batch(t, resume={"epoch": 2, "position": 18, "next_step": 41, "sources": [(1, 7), (5, 3)]})
        arrays, meta = read_batch(data)
        self.assertEqual({"epoch": 2, "position": 18, "next_step": 41,
                          "sources": [{"epoch": 1, "position": 7}, {"epoch": 5, "position": 3}]}, meta.resume)
        np.testing.assert_array_equal(arrays["input_ids"], t["input_ids"])
        self.assertIsNone(read_batch(write_batch(t))[1].resume, "a batch without the block has none")
        bad = bytearray(data)
        struct.pack_into("<I", bad, 64 + 128 + 4, 1000)  # more sources than the header holds
        with self.assertRaisesRegex(ProtocolError, "resume block names 1000 sources"):
            read_batch(bytes(bad))

    def test_bad_magic(self):
        self.assertMalformed(b"NOPE" + self.data[4:], "magic")

    def test_other_layout_version(self):
        # a service of the release before: sample_index unflagged among the inputs, refused rather than fed to the model
        old = write_batch(self.tensors, version=1)
        self.assertMalformed(old, "batch layout version 1 is not supported", "reads version 2", "sample_index")
        self.assertMalformed(patched(self.data, "<I", 4, 3), "layout version 3")

    def test_unknown_descriptor_flags(self):
        self.assertMalformed(patched(self.data, "<I", D0 + 104, 6), "'input_ids' (descriptor 0): unknown descriptor flags 0x6")

    def test_short(self):
        self.assertMalformed(self.data[:40], "at least 64")

    def test_truncated(self):
        self.assertMalformed(self.data[:-64], "total bytes")

    def test_header_bytes_too_small(self):
        self.assertMalformed(patched(self.data, "<I", 12, 128), "header bytes 128")

    def test_tensor_outside(self):
        self.assertMalformed(patched(self.data, "<Q", D0 + 88, len(self.data)), "'input_ids'", "outside")

    def test_tensor_inside_header(self):
        self.assertMalformed(patched(self.data, "<Q", D0 + 88, 64), "'input_ids'", "outside")

    def test_misaligned_offset(self):
        o = struct.unpack_from("<Q", self.data, D0 + 88)[0]
        self.assertMalformed(patched(self.data, "<Q", D0 + 88, o + 8), "multiple of 64")

    def test_length_mismatch(self):
        self.assertMalformed(patched(self.data, "<Q", D0 + 96, 8), "length 8 bytes", "needs 128")

    def test_unknown_dtype(self):
        self.assertMalformed(patched(self.data, "<I", D0 + 32, 9), "unknown dtype code 9")

    def test_bad_ndim(self):
        self.assertMalformed(patched(self.data, "<I", D0 + 36, 7), "ndim 7")

    def test_unused_dims_nonzero(self):
        self.assertMalformed(patched(self.data, "<Q", D0 + 40 + 8 * 5, 1), "unused dimensions")

    def test_non_ascii_name(self):
        self.assertMalformed(patched(self.data, "<B", D0, 0xFF), "not ASCII")

    def test_duplicate_name(self):
        name = struct.unpack_from("<32s", self.data, D0)[0]
        self.assertMalformed(patched(self.data, "<32s", D0 + 128, name), "duplicate")


if __name__ == "__main__":
    unittest.main()
