# Writes reference.safetensors with the reference implementation (the Python `safetensors` package, whose
# writer is the Rust crate). Run once by hand, never by the test suite:
#   python -m venv venv && venv/bin/pip install safetensors numpy && venv/bin/python make_fixture.py
# The expected values are repeated in tests/serialize/reference_test.cpp.
import numpy as np
from safetensors.numpy import save_file

tensors = {
    "f32": np.array([[1.5, -2.0, 3.25], [0.0, -0.0, 1e-40]], dtype=np.float32),  # 1e-40: a subnormal
    "f64": np.array([np.pi, -1e300, 5e-324], dtype=np.float64),
    "f16": np.array([1.0, -2.5, 65504.0, 6e-8, np.inf], dtype=np.float16),
    "i32": np.array([[-2147483648], [2147483647], [7]], dtype=np.int32),
    "i64": np.array([-(2**63), 2**63 - 1, 42, -1], dtype=np.int64),
    "u8": np.array([0, 1, 127, 128, 255], dtype=np.uint8),
    "flags": np.array([True, False, True], dtype=np.bool_),
    "scalar": np.array(7.0, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}
save_file(tensors, "reference.safetensors", metadata={"format": "np", "note": "written by safetensors"})
