"""The cluster wire format: frames round-trip, and bad frames are refused by name.

Protects: a header announcing more than MAX_FRAME bytes, an empty target range, or a
payload that is not msgpack raises FrameError (the connection is then refused or the
peer fail-stopped with that message), never a crash or a silent misdelivery. And the
codec's two twins are interchangeable on the wire: the compiled ``packb`` writes the
library's bytes for every value, the compiled ``Decoder`` returns the library's values
(its interned strings included), both refuse the same malformed payloads, and values
outside the compiled fast path get the library's result or error.
"""
import math

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from twin_calls import outcome

from timely.communication.codec import (HEADER, MAX_FRAME, FrameError, decode_header, decode_payload,
                                        encode_frame, new_decoder)

TWIN_NEEDS = ("codec",)


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


# ---- the codec's twins ----------------------------------------------------------------
# Every msgpack size class: fixint/fixstr/fixarray edges, 8/16/32-bit lengths, 64-bit ints.
_ints = st.one_of(st.integers(-40, 300), st.sampled_from([
    -33, -32, -129, -128, -32769, -32768, -2**31 - 1, -2**31, -2**63, 127, 128, 255, 256,
    65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]), st.integers(-2**63, 2**64 - 1))
_texts = st.one_of(st.text(max_size=40), st.sampled_from(["", "a" * 31, "a" * 32, "b" * 255, "é" * 16]),
                   st.text(alphabet="xyz", min_size=250, max_size=300))
_scalars = st.one_of(st.none(), st.booleans(), _ints, st.floats(allow_nan=False), _texts,
                     st.binary(max_size=300))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=20), st.lists(inner, max_size=20).map(tuple),
    st.dictionaries(st.one_of(_texts, _ints), inner, max_size=8)), max_leaves=60)


@given(_values)
def test_compiled_packb_writes_the_library_bytes(compiled_codec, value):
    assert compiled_codec.packb(value) == msgpack.packb(value, use_bin_type=True)


@given(_values)
def test_compiled_decoder_returns_the_library_values(compiled_codec, value):
    data = msgpack.packb(value, use_bin_type=True)
    expected = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)
    decoder = compiled_codec.Decoder()
    assert decoder.decode(data) == expected
    assert decoder.decode(memoryview(bytearray(data))) == expected     # as the receive loop passes it


def test_long_and_non_ascii_strings_and_large_containers_round_trip(codec_twin):
    value = ("é" * 40, "x" * 70_000, b"\x00" * 70_000, list(range(70_000)), {str(i): i for i in range(20)})
    decoded = codec_twin.Decoder().decode(codec_twin.packb(value))
    assert decoded == ("é" * 40, "x" * 70_000, b"\x00" * 70_000, tuple(range(70_000)), value[4])


def test_a_repeated_short_key_decodes_to_one_string_object(compiled_codec):
    decoder = compiled_codec.Decoder()
    first = decoder.decode(compiled_codec.packb(["word", "other", "word"]))
    again = decoder.decode(compiled_codec.packb(("word",)))
    assert first == ("word", "other", "word") and first[0] is first[2] is again[0]
    assert (decoder.hits, decoder.misses) == (2, 2)


def test_float32_and_extension_types_decode_as_the_library_does(compiled_codec):
    for data in (b"\xca\x3f\xc0\x00\x00", msgpack.packb(msgpack.ExtType(5, b"abc")),
                 b"\x92\xd6\xff\x00\x00\x00\x01\xa1a"):       # a timestamp extension in an array
        expected = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)
        assert compiled_codec.Decoder().decode(data) == expected


class _Int(int):
    pass


@pytest.mark.parametrize("value", [{3, 1, 2}, frozenset(["b", "a"]), [_Int(7)], (2**64,), [-2**63 - 1],
                                   "\ud800", [object()], [[[]] * 2] * 3],
                         ids=["set", "frozenset", "int-subclass", "2**64", "below-int64", "surrogate",
                              "object", "shared-lists"])
def test_values_outside_the_fast_path_get_the_library_result_or_error(compiled_codec, value):
    from timely.communication.codec import py_packb
    assert outcome(compiled_codec.packb, value) == outcome(py_packb, value)


def test_nesting_deeper_than_the_fast_path_gets_the_library_result(compiled_codec):
    from timely.communication.codec import PyDecoder, py_packb
    deep = 0
    for _ in range(600):
        deep = [deep]
    assert outcome(compiled_codec.packb, deep) == outcome(py_packb, deep)
    data = b"\x91" * 600 + b"\x00"
    assert outcome(compiled_codec.Decoder().decode, data) == outcome(PyDecoder().decode, data)


@pytest.mark.parametrize("data", [b"\x93\x01\x02", b"\xa5abc", b"\xcd\x01", b"\x01\x02", b"\xc1",
                                  b"\xa2\xff\xfe", b"\xc4\x05ab", b""],
                         ids=["short-array", "short-str", "short-int", "extra-bytes", "reserved",
                              "bad-utf8", "short-bin", "empty"])
def test_both_decoders_refuse_malformed_payloads_by_name(codec_twin, data):
    with pytest.raises(FrameError, match="payload is not valid msgpack"):
        decode_payload(data, codec_twin.Decoder())


@given(_values, st.data())
def test_every_truncation_of_a_payload_is_refused(codec_twin, value, data):
    packed = codec_twin.packb([value, 1])
    cut = data.draw(st.integers(0, len(packed) - 1))
    with pytest.raises(FrameError):
        decode_payload(packed[:cut], codec_twin.Decoder())


def test_nan_round_trips(codec_twin):
    (x,) = codec_twin.Decoder().decode(codec_twin.packb([math.nan]))
    assert math.isnan(x)


def test_new_decoder_is_the_built_twin():
    from timely.communication import codec
    assert type(new_decoder()).__name__ == ("Decoder" if codec.IMPLEMENTATION == "cython" else "PyDecoder")


# ---- the receive loop: frames however the bytes arrive ---------------------------------
class _Hub:
    """What a Connection's receive thread reports to: deliveries and failures."""

    def __init__(self):
        import threading
        self.timeout = 10.0
        self.process = 0
        self.delivered = []
        self.sizes = []             # each data frame's size, as delivered (credit counts it)
        self.credits = []
        self.lost = []
        self.done = threading.Event()

    def deliver(self, channel, source, first, last, seq, payload, size):
        self.delivered.append((channel, source, first, last, seq, payload))
        self.sizes.append(size)

    def credit(self, entries):
        self.credits.append(entries)

    def control(self, conn, source, first, last, payload):
        self.delivered.append(("control", payload))

    def connection_closed(self, conn):
        self.done.set()

    def connection_lost(self, conn, why):
        self.lost.append(why)
        self.done.set()


def _receive(chunks, close=False):
    """Feed ``chunks`` (bytes) one write at a time into a Connection's receive loop over
    loopback TCP; ``close``: then close the sending end without a goodbye."""
    import socket
    from timely.communication.cluster.connection import Connection
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    theirs = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    theirs.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hub = _Hub()
    conn = Connection(hub, 1, ours, joining=False)
    conn._receiver.start()
    for chunk in chunks:
        theirs.sendall(chunk)
    if close:
        theirs.close()
    assert hub.done.wait(30), "the receive loop neither finished nor failed"
    conn._receiver.join(10)
    theirs.close()
    ours.close()
    return hub


def test_receive_loop_reassembles_frames_split_anywhere_and_larger_than_its_buffer():
    from timely.communication.cluster.connection import _RECV_CHUNK, CONTROL
    big = ["x" * 1000] * (3 * _RECV_CHUNK // 1000)          # a 3 MB frame: the buffer grows
    payloads = [(0, ["a", (1, 2)]), (1, big), (2, []), (3, ["b"] * 5000)]
    frames = [encode_frame(5, 1, 0, 0, i, p) for i, p in enumerate(payloads)]
    frames.append(encode_frame(CONTROL, -1, 0, 0, 0, ("hb",)))
    frames.append(encode_frame(CONTROL, 2, 0, 0, 0, ("credit", [(5, 0, 2, 4096)])))
    frames.append(encode_frame(CONTROL, -1, 0, 0, 0, ("rescale", 7)))
    frames.append(encode_frame(CONTROL, -1, 0, 0, 0, ("bye",)))
    data = b"".join(frames)
    # 1-byte writes at first (every header and payload split), then uneven larger ones.
    cuts = list(range(0, 200)) + list(range(200, len(data), 65_519)) + [len(data)]
    hub = _receive([data[a:b] for a, b in zip(cuts, cuts[1:])])
    assert hub.lost == []
    expected = [(5, 1, 0, 0, i, decode_payload(encode_frame(5, 1, 0, 0, i, p)[HEADER.size:]))
                for i, p in enumerate(payloads)]
    assert hub.delivered == expected + [("control", ("rescale", 7))]
    assert hub.sizes == [len(f) for f in frames[:len(payloads)]]       # what a sender counts
    assert hub.credits == [((5, 0, 2, 4096),)]                            # to the hub, not the workers


def test_receive_loop_fail_stops_on_a_malformed_frame_after_good_ones():
    good = encode_frame(5, 1, 0, 0, 0, (0, ["a"]))
    bad = HEADER.pack(5, 1, 0, 0, 1, 3) + b"\xc1\xc1\xc1"      # 0xc1: never valid msgpack
    hub = _receive([good + bad[:10], bad[10:]])
    assert [d[-1] for d in hub.delivered] == [(0, ("a",))]
    assert len(hub.lost) == 1 and hub.lost[0].startswith("sent a malformed frame: payload is not valid msgpack")


def test_receive_loop_reports_a_peer_that_closes_mid_frame():
    frame = encode_frame(5, 1, 0, 0, 0, (0, ["a"] * 100))
    hub = _receive([frame + frame[:HEADER.size + 7]], close=True)
    assert len(hub.delivered) == 1
    assert hub.lost == ["disconnected (connection closed)"]
