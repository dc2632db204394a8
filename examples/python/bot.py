#!/usr/bin/env python3
"""A volley bot in Python, with nothing but the standard library's ctypes: connects to an
arena server, steers its avatar, decodes the snapshots and reads the arena's reliable
messages, and predicts its own avatar, through volley-ffi (libvolley_ffi.so).

    cargo build -p volley-ffi
    volley schema > arena.json
    volley token --private-key KEY --client-id 1 --server 127.0.0.1:40000 --out token.bin
    VOLLEY_FFI_LIB=target/debug/libvolley_ffi.so python3 examples/python/bot.py token.bin arena.json 5 [seen.txt]

It plays SECONDS seconds at 60 frames a second. For each new snapshot it writes the avatars
exactly as that snapshot holds them ("tick T", then a line per avatar: id and its numbers) to
the fourth argument's file, if given. It exits 0 when it was connected, decoded snapshots and
was welcomed by the arena; 1 otherwise.
"""
import ctypes as C
import math
import os
import sys
import time

OK, ERR_HANDLE, ERR_TOO_SMALL = 0, -2, -5
CONNECTED, ENDED, RESUMING = 1, 2, 3


class Stats(C.Structure):
    """VolleyStats, as include/volley.h lays it out."""
    _fields_ = [
        ("rtt_ms", C.c_double),
        ("loss", C.c_double),
        ("snapshots", C.c_uint64),
        ("snapshot_errors", C.c_uint64),
        ("bytes_received", C.c_uint64),
        ("frames_interpolated", C.c_uint64),
        ("frames_extrapolated", C.c_uint64),
        ("render_delay_ticks", C.c_double),
        ("jitter_ms", C.c_double),
        ("render_delay_ms", C.c_double),
    ]


def load(path):
    lib = C.CDLL(path)
    u64, i32, u32, u16, size = C.c_uint64, C.c_int32, C.c_uint32, C.c_uint16, C.c_size_t
    sig = {
        "volley_last_error": (size, [C.c_char_p, size]),
        "volley_client_new": (i32, [C.c_char_p, size, C.c_char_p, C.c_char_p, C.POINTER(u64)]),
        "volley_client_free": (i32, [u64]),
        "volley_client_poll": (i32, [u64, C.c_char_p, size]),
        "volley_client_status": (i32, [u64]),
        "volley_client_rebind": (i32, [u64, i32]),
        "volley_client_resumes": (i32, [u64, C.POINTER(u32)]),
        "volley_client_index": (i32, [u64, C.POINTER(u32)]),
        "volley_client_end_reason": (i32, [u64, C.c_char_p, size]),
        "volley_client_kind": (i32, [u64, C.c_char_p, C.POINTER(u16), C.POINTER(u32)]),
        "volley_client_entities": (i32, [u64, u16, C.POINTER(u32), C.POINTER(C.c_double), size, C.POINTER(size)]),
        "volley_client_latest_tick": (i32, [u64, C.POINTER(u32)]),
        "volley_client_snapshot_entities": (
            i32, [u64, u32, u16, C.POINTER(u32), C.POINTER(C.c_double), size, C.POINTER(size)]),
        "volley_client_next_message": (i32, [u64, C.c_char_p, size, C.POINTER(size), C.POINTER(C.c_bool)]),
        "volley_client_stats": (i32, [u64, C.POINTER(Stats)]),
        "volley_client_input_seq": (i32, [u64, C.POINTER(u32)]),
        "volley_client_applied_input": (i32, [u64, u32, C.POINTER(u32)]),
        "volley_client_own_entity": (i32, [u64, C.POINTER(u32)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def last_error(lib):
    buf = C.create_string_buffer(512)
    lib.volley_last_error(buf, len(buf))
    return buf.value.decode()


def arena_input(move_x, move_y, aim, fire):
    """The arena's input as postcard writes its ArenaInput: two signed bytes, a varint aim
    (a 65536th of a turn), then fire and rail as bytes."""
    out = bytearray([move_x & 0xFF, move_y & 0xFF])
    while True:
        b, aim = aim & 0x7F, aim >> 7
        out.append(b | 0x80 if aim else b)
        if not aim:
            break
    out += bytes([1 if fire else 0, 0])
    return bytes(out)


SPEED, HALF_SIZE, HISTORY = 8.0, 50.0, 128


class Prediction:
    """The own avatar, predicted: the arena moves an avatar by its newest input each tick
    (SPEED metres a second, inside the walls), and this bot sends one input a frame, so it
    applies each input at once; each new snapshot reconciles (its position of the own entity,
    with the inputs the server had not applied replayed on it), and what that moves the
    prediction by is a correction."""

    def __init__(self):
        self.sent = {}
        self.pos = None
        self.reconciled = self.corrections = 0
        self.corrected = 0.0

    @staticmethod
    def step(pos, d):
        lim = HALF_SIZE - 0.5
        return tuple(max(-lim, min(lim, p + v * SPEED / 60.0)) for p, v in zip(pos, d))

    def sent_input(self, seq, move_x, move_y):
        d = (move_x / 127.0, move_y / 127.0)
        n = math.hypot(*d)
        d = (d[0] / n, d[1] / n) if n > 1.0 else d
        self.sent[seq] = d
        self.sent.pop(seq - HISTORY, None)
        if self.pos is not None:
            self.pos = self.step(self.pos, d)

    def reconcile(self, pos, applied, newest):
        for seq in range(newest - HISTORY + 1 if applied is None else applied + 1, newest + 1):
            if seq in self.sent:
                pos = self.step(pos, self.sent[seq])
        if self.pos is not None:
            e = math.dist(pos, self.pos)
            self.corrected += e
            self.corrections += e > 0.01
        self.pos = pos
        self.reconciled += 1


def varints(data):
    """The varints of a postcard message, in order."""
    v, shift = 0, 0
    for b in data:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            yield v
            v, shift = 0, 0


def main():
    if len(sys.argv) < 4:
        print(f"usage: {sys.argv[0]} TOKEN_FILE SCHEMA_FILE SECONDS [SEEN_OUT]", file=sys.stderr)
        return 2
    lib = load(os.environ.get("VOLLEY_FFI_LIB", "libvolley_ffi.so"))
    token = open(sys.argv[1], "rb").read()
    schema = open(sys.argv[2], "rb").read()
    seconds = int(sys.argv[3])
    out = open(sys.argv[4], "w") if len(sys.argv) > 4 else None

    client = C.c_uint64()
    rc = lib.volley_client_new(token, len(token), schema, None, C.byref(client))
    if rc != OK:
        print(f"volley_client_new: {rc}: {last_error(lib)}", file=sys.stderr)
        return 1
    kind, per = C.c_uint16(), C.c_uint32()
    if lib.volley_client_kind(client, b"Avatar", C.byref(kind), C.byref(per)) != OK:
        print(f"volley_client_kind: {last_error(lib)}", file=sys.stderr)
        return 1
    cap = 256
    ids = (C.c_uint32 * cap)()
    values = (C.c_double * (cap * per.value))()
    count = C.c_size_t()
    message = C.create_string_buffer(1024)
    length, reliable = C.c_size_t(), C.c_bool()
    me, tick, last_tick = C.c_uint32(), C.c_uint32(), None
    connected = welcomed = too_small_seen = False
    snapshots = drawn = 0
    prediction, seq, own, applied = Prediction(), C.c_uint32(), C.c_uint32(), C.c_uint32()
    me_before_rebind, resuming_frames = 0, 0
    for f in range(seconds * 60):
        # Half way: the socket moves to a new port, as a NAT rebinding moves a player; untold,
        # the library hears a second of silence and resumes with its ticket.
        if f == seconds * 30 and connected:
            me_before_rebind = me.value
            if lib.volley_client_rebind(client, 0) < 0:
                print(f"volley_client_rebind: {last_error(lib)}", file=sys.stderr)
        a = f * 0.05
        aim = int((a / (2 * math.pi)) % 1.0 * 65536) & 0xFFFF
        move_x, move_y = int(math.cos(a) * 127), int(math.sin(a) * 127)
        data = arena_input(move_x, move_y, aim, f % 30 == 0)
        before = seq.value if lib.volley_client_input_seq(client, C.byref(seq)) == 1 else None
        rc = lib.volley_client_poll(client, data, len(data))
        if rc < 0:
            print(f"volley_client_poll: {rc}: {last_error(lib)}", file=sys.stderr)
            break
        snapshots += rc
        # The input went out (once connected): predicted at once.
        if lib.volley_client_input_seq(client, C.byref(seq)) == 1 and seq.value != before:
            prediction.sent_input(seq.value, move_x, move_y)
        status = lib.volley_client_status(client)
        if status == CONNECTED and not connected:
            connected = True
            lib.volley_client_index(client, C.byref(me))
            print(f"connected as player {me.value}")
        if status == RESUMING:
            resuming_frames += 1
        if status == ENDED:
            why = C.create_string_buffer(256)
            lib.volley_client_end_reason(client, why, len(why))
            print(f"ended: {why.value.decode()}")
            break
        # The arena's messages: variant 1 is a welcome (player id), 0 a kill. Asked first with
        # no room: the message waits, and its length says how much room it needs.
        if lib.volley_client_next_message(client, None, 0, C.byref(length), C.byref(reliable)) == ERR_TOO_SMALL:
            assert length.value > 0, "a message too big for no room says its length"
            too_small_seen = True
        while lib.volley_client_next_message(client, message, len(message), C.byref(length), C.byref(reliable)) == 1:
            fields = list(varints(message.raw[:length.value]))
            if len(fields) >= 2 and fields[0] == 1:
                print(f"welcome: player {fields[1]} (reliable {int(reliable.value)})")
                welcomed = reliable.value and fields[1] == me.value
        if lib.volley_client_latest_tick(client, C.byref(tick)) == 1 and tick.value != last_tick:
            last_tick = tick.value
            rc = lib.volley_client_snapshot_entities(client, tick, kind, ids, values, cap, C.byref(count))
            if rc == 1 and lib.volley_client_own_entity(client, C.byref(own)) == 1 \
                    and lib.volley_client_input_seq(client, C.byref(seq)) == 1:
                done = lib.volley_client_applied_input(client, tick, C.byref(applied)) == 1
                for i in range(count.value):
                    if ids[i] == own.value:
                        at = (values[i * per.value], values[i * per.value + 1])
                        prediction.reconcile(at, applied.value if done else None, seq.value)
            if rc == 1 and out:
                out.write(f"tick {tick.value}\n")
                for i in range(count.value):
                    row = " ".join(repr(values[i * per.value + v]) for v in range(per.value))
                    out.write(f"{ids[i]} {row}\n")
        if lib.volley_client_entities(client, kind, ids, values, cap, C.byref(count)) == OK and count.value:
            drawn += 1
            # Room for none: the count says how many there are, and nothing is written.
            assert lib.volley_client_entities(client, kind, None, None, 0, C.byref(count)) == ERR_TOO_SMALL
            assert count.value >= 1
        time.sleep(1 / 60)
    resumes, me_after = C.c_uint32(), C.c_uint32()
    lib.volley_client_resumes(client, C.byref(resumes))
    lib.volley_client_index(client, C.byref(me_after))
    print(f"resumes {resumes.value}, player {me_before_rebind} before the rebind and {me_after.value} after, "
          f"{resuming_frames} frames resuming")
    stats = Stats()
    lib.volley_client_stats(client, C.byref(stats))
    print(f"snapshots {snapshots} (decoded {stats.snapshots}, errors {stats.snapshot_errors}), "
          f"frames drawn {drawn}, rtt {stats.rtt_ms:.2f} ms")
    mean = prediction.corrected / prediction.reconciled if prediction.reconciled else 0.0
    print(f"prediction: {prediction.reconciled} reconciled, {prediction.corrections} corrections, "
          f"mean {mean:.4f} m; jitter {stats.jitter_ms:.2f} ms, render delay {stats.render_delay_ms:.1f} ms")
    lib.volley_client_free(client)
    if lib.volley_client_status(client) != ERR_HANDLE:
        print("a freed handle was not refused")
        return 1
    if out:
        out.close()
    ok = connected and snapshots >= 30 and welcomed and drawn > 0 and too_small_seen and prediction.reconciled >= 30
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
