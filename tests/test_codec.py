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


# ---- the receive loop: frames however the bytes arrive ---------------------------------
class _Hub:
    """What a Connection's receive thread reports to: deliveries and failures."""

    def __init__(self):
        import threading
        self.timeout = 10.0
        self.process = 0
        self.delivered = []
        self.lost = []
        self.done = threading.Event()

    def deliver(self, channel, source, first, last, seq, payload):
        self.delivered.append((channel, source, first, last, seq, payload))

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
    from timely.communication.cluster import Connection
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
    from timely.communication.cluster import _RECV_CHUNK, CONTROL
    big = ["x" * 1000] * (3 * _RECV_CHUNK // 1000)          # a 3 MB frame: the buffer grows
    payloads = [(0, ["a", (1, 2)]), (1, big), (2, []), (3, ["b"] * 5000)]
    frames = [encode_frame(5, 1, 0, 0, i, p) for i, p in enumerate(payloads)]
    frames.append(encode_frame(CONTROL, -1, 0, 0, 0, ("hb",)))
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
