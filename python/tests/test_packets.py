"""Packets and format strings: Python values in, the same values out."""

from __future__ import annotations

import numpy as np
import pytest
import vargr


def test_scalars_strings_arrays_and_raw_bytes_keep_their_values() -> None:
    p = vargr.Packet(
        7,
        "%d %uld %lf %f %s %ad %as %b %c",
        -3,
        2**63,
        0.25,
        1.5,
        "héllo",
        [1, 2],
        ["a", "b"],
        b"\x00\xff",
        -1,
    )
    assert p.tag == 7 and p.stream == 0 and p.source is None
    assert p.format == "%d %uld %lf %f %s %ad %as %b %c"
    assert p[0] == -3 and p[1] == 2**63 and p[2] == 0.25 and p[3] == 1.5
    assert p[4] == "héllo" and p[6] == ["a", "b"] and p[7] == b"\x00\xff" and p[8] == -1
    assert isinstance(p[5], np.ndarray) and p[5].dtype == np.int32 and p[5].tolist() == [1, 2]
    assert len(p) == 9 and next(iter(p)) == -3 and p.values[-1] == -1


def test_numpy_arrays_keep_their_dtype_and_accept_lossless_casts() -> None:
    a = np.arange(10, dtype=np.float64).reshape(2, 5)
    p = vargr.Packet(
        1, "%alf %af %auc", a, np.arange(3, dtype=np.float32), np.array([1, 255], dtype=np.uint8)
    )
    np.testing.assert_array_equal(p[0], a.ravel())
    assert p[0].dtype == np.float64 and p[1].dtype == np.float32 and p[2].dtype == np.uint8
    # int32 into a double array is safe; float into an int array is not.
    assert vargr.Packet(1, "%alf", np.arange(3, dtype=np.int32))[0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(vargr.FormatError):
        vargr.Packet(1, "%ad", np.array([0.5]))
    # A non-contiguous view is read in logical order.
    assert vargr.Packet(1, "%ald", np.arange(10)[::3])[0].tolist() == [0, 3, 6, 9]


def test_format_errors_are_value_errors_naming_the_problem() -> None:
    with pytest.raises(vargr.FormatError, match="unknown conversion"):
        vargr.Packet(1, "%q", 1)
    with pytest.raises(ValueError, match="2 fields, 1 values"):
        vargr.Packet(1, "%d %d", 1)
    with pytest.raises(vargr.FormatError, match="value 0"):
        vargr.Packet(1, "%d", "not a number")
    with pytest.raises(vargr.FormatError, match="%uc"):
        vargr.Packet(1, "%uc", 300)


def test_repr_shows_tag_source_and_values() -> None:
    r = repr(vargr.Packet(5, "%d", 9, stream=17, source=3))
    assert "tag=5" in r and "stream=17" in r and "source=3" in r and "(9,)" in r
