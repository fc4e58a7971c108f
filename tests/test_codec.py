"""The cluster wire format: frames round-trip, and bad frames are refused by name.

Protects: a header announcing more than MAX_FRAME bytes, an empty target range, or a
payload that is not msgpack raises FrameError (the connection is then refused or the
peer fail-stopped with that message), never a crash or a silent misdelivery.
"""
import pytest

from timely.communication.codec import (HEADER, MAX_FRAME, FrameError, decode_header, decode_payload,
                                        encode_frame)


def test_frames_round_trip_tuples_and_progress_batches():
    batch = (3, 17, [(((1, 0, True), (4, 2)), -1), (((2, 1, False), (4, 3)), 1)])
    frame = encode_frame(9, 3, 4, 7, 0, batch)
    channel, source, first, last, seq, length = decode_header(frame[:HEADER.size])
    assert (channel, source, first, last, length) == (9, 3, 4, 7, len(frame) - HEADER.size)
    assert decode_payload(frame[HEADER.size:]) == (3, 17, ((((1, 0, True), (4, 2)), -1),
                                                          (((2, 1, False), (4, 3)), 1)))


def test_oversized_frame_is_refused():
    header = HEADER.pack(1, 0, 0, 0, 0, MAX_FRAME + 1)
    with pytest.raises(FrameError, match="more than the"):
        decode_header(header)


def test_empty_target_range_is_refused():
    with pytest.raises(FrameError, match="empty range"):
        decode_header(HEADER.pack(1, 0, 5, 4, 0, 10))


def test_garbage_payload_is_refused():
    with pytest.raises(FrameError, match="not valid msgpack"):
        decode_payload(b"\xc1\xc1\xc1")


def test_unsendable_record_names_its_type():
    with pytest.raises(TypeError, match="cannot send a object"):
        encode_frame(1, 0, 0, 0, 0, (1, [object()]))
