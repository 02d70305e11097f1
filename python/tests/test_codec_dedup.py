"""Codec and dedup entry points: compress and read back, measure, ask the engine,
segment, fingerprint and deduplicate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import vargr
from vargr import codec, dedup


def smooth(n: int) -> np.ndarray:
    return np.sin(np.linspace(0.0, 20.0, n)) * 1000.0


@pytest.mark.parametrize("name", codec.codecs())
def test_every_codec_gives_back_the_exact_bytes(name: str) -> None:
    data = smooth(4096)
    frame = codec.compress(data, name)
    assert codec.decompress(frame) == data.tobytes()
    back = codec.decompress_array(frame)
    assert back.dtype == np.float64 and np.array_equal(back, data)


def test_fpc_shrinks_predictable_doubles_and_random_bytes_travel_raw() -> None:
    data = np.arange(1 << 14, dtype=np.float64) * 0.25
    frame = codec.compress(data, "fpc")
    info = codec.frame_info(frame)
    assert info["codec"] == "fpc" and info["elem"] == "f64"
    assert info["original_len"] == data.nbytes and len(frame) < data.nbytes // 2
    noise = np.random.default_rng(1).integers(0, 256, 1 << 14, dtype=np.uint8).tobytes()
    assert codec.frame_info(codec.compress(noise, "lz4"))["codec"] == "none"


def test_bad_names_and_broken_frames_raise_codec_error() -> None:
    with pytest.raises(vargr.CodecError, match="zstd level 99"):
        codec.compress(b"abc", "zstd:99")
    with pytest.raises(vargr.CodecError, match="does not handle"):
        codec.compress(b"abc", "fpc", elem="u8")
    frame = bytearray(codec.compress(b"a" * 1000, "lz4"))
    with pytest.raises(vargr.CodecError):
        codec.decompress(bytes(frame[:5]))
    with pytest.raises(vargr.CodecError, match="exceeds the limit"):
        codec.decompress(bytes(frame), max_len=10)


def test_measure_and_the_engine_choice_on_a_slow_link() -> None:
    data = smooth(1 << 15)
    ms = codec.measure(data)
    assert {m["codec"] for m in ms} >= {"lz4", "fpc:16"}
    assert all(m["verified"] for m in ms)
    slow = codec.choose(data, bandwidth="10mbit", latency="1ms")
    assert slow["codec"] != "none" and slow["measures"]
    engine = codec.Engine(bandwidth="10mbit", latency="1ms")
    engine.calibrate(data)
    name, reason = engine.decide(data)
    assert name != "none", reason
    frame = engine.compress(data)
    assert codec.decompress(frame) == data.tobytes()
    assert engine.summary(0, "f64") is not None


def test_segments_cover_the_data_and_fingerprints_name_them(tmp_path: Path) -> None:
    data = np.random.default_rng(2).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    segs = dedup.segment(data, "cdc:1k:4k:16k")
    assert segs[0][0] == 0 and sum(n for _, n in segs) == len(data)
    assert all(a + n == b for (a, n), (b, _) in zip(segs, segs[1:]))
    assert all(n <= 16 * 1024 for _, n in segs)
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert dedup.segment(f, "cdc:1k:4k:16k") == segs
    assert dedup.fingerprint(b"abc") == dedup.fingerprint(bytearray(b"abc"))
    assert dedup.fingerprint(b"abc") != dedup.fingerprint(b"abd")
    assert dedup.fingerprint(b"abc", bits=40) < 2**40
    with pytest.raises(vargr.DedupError, match="segmenter spec"):
        dedup.segment(data, "zigzag")


def test_a_session_sends_repeated_content_as_fingerprints(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    v1 = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    v2 = v1[:100_000] + b"inserted!" + v1[100_000:]
    s = dedup.Session("cdc:1k:4k:16k")
    first = s.transfer(v1)
    assert first["bytes"] == len(v1) and first["wire_bytes"] > len(v1) * 0.9
    second = s.transfer(v2)
    # The insertion moves only the boundaries near it: most segments are fingerprints.
    assert second["wire_bytes"] < len(v2) // 10, second
    f = tmp_path / "v2"
    f.write_bytes(v2)
    third = s.transfer(f)
    assert third["wire_bytes"] < second["wire_bytes"] + 1000
    stats = s.stats()
    assert stats["fingerprinted"] > 0 and stats["collisions"] == 0
