#!/usr/bin/env python3
"""Reads a run folder written by kiln's TensorBoardLogger with TensorBoard's own loader and checks its scalars.

An independent check of the event-file writer (framing, CRCs, protobuf encoding, the resume purge), run by hand;
the C++ test suite does not need Python. Usage:

    KILN_KEEP_TFEVENTS=/tmp/tb ./kiln_trainer_io_tests --gtest_filter='*IndependentCheck*'
    python3 tests/trainer/tensorboard_check.py /tmp/tb/check/version_0            # uses DIR/expected.txt
    python3 tests/trainer/tensorboard_check.py DIR train/loss:3:0.25 val/acc:0:0   # or tag:step:value points

expected.txt holds one `tag step value` line per point. Every listed tag must have exactly the listed points
after TensorBoard's purge of steps a resume discarded; values compare as float32. Where DIR/expected_media.txt
exists, its `histogram TAG STEP key=value...` and `image TAG STEP key=value...` lines are checked the same way:
each tag must hold exactly that one event, a histogram's fields as listed, an image's size and its PNG's pixels
(inflated here with Python's zlib, unfiltered by the PNG specification). Exits 1 on any mismatch.
"""
import argparse
import os
import struct
import sys
import zlib

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    """x rounded to float32, as simple_value stores it."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def load_expected(args):
    points = {}
    lines = []
    if args.points:
        lines = [p.replace(":", " ", 2).rsplit(" ", 2) for p in args.points]
    else:
        path = os.path.join(args.dir, "expected.txt")
        with open(path) as f:
            lines = [line.split() for line in f if line.strip()]
    for tag, step, value in lines:
        points.setdefault(tag, {})[int(step)] = f32(value)
    return points


def png_pixels(data):
    """(width, height, channels, pixel bytes) of an 8-bit PNG without interlacing."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body), "CRC"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color = header[:4]
    assert depth == 8, depth
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw, row, out = zlib.decompress(idat), width * channels, bytearray()
    for y in range(height):
        kind, line = raw[y * (row + 1)], raw[y * (row + 1) + 1:(y + 1) * (row + 1)]
        prev = out[(y - 1) * row:y * row] if y else bytearray(row)
        cur = bytearray(row)
        for i in range(row):
            a = cur[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            p = a + b - c
            pred = [0, a, b, (a + b) // 2,
                    a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c][kind]
            cur[i] = (line[i] + pred) & 0xFF
        out += cur
    return width, height, channels, bytes(out)


def check_media(acc, tags, path, failures):
    for line in open(path):
        if not line.strip():
            continue
        kind, tag, step, *fields = line.split()
        want = dict(f.split("=", 1) for f in fields)
        if kind == "histogram":
            events = acc.Histograms(tag) if tag in tags["histograms"] else []
            if [e.step for e in events] != [int(step)]:
                failures.append(f"{tag}: histogram steps {[e.step for e in events]} != [{step}]")
                continue
            h = events[0].histogram_value
            print(f"{tag} histogram at {step}: {h}")
            got = {"min": h.min, "max": h.max, "num": h.num, "sum": h.sum}
            for key in got:
                if got[key] != float(want[key]):
                    failures.append(f"{tag}: {key} {got[key]} != {want[key]}")
            if list(h.bucket_limit) != [float(x) for x in want["limits"].split(",")]:
                failures.append(f"{tag}: bucket limits {list(h.bucket_limit)} != {want['limits']}")
            if list(h.bucket) != [float(x) for x in want["counts"].split(",")]:
                failures.append(f"{tag}: buckets {list(h.bucket)} != {want['counts']}")
        elif kind == "image":
            events = acc.Images(tag) if tag in tags["images"] else []
            if [e.step for e in events] != [int(step)]:
                failures.append(f"{tag}: image steps {[e.step for e in events]} != [{step}]")
                continue
            e = events[0]
            width, height, channels, pixels = png_pixels(e.encoded_image_string)
            print(f"{tag} image at {step}: {e.width} x {e.height}, PNG {width} x {height} x {channels}")
            if (e.width, e.height, width, height, channels) != (int(want["width"]), int(want["height"]),
                                                                int(want["width"]), int(want["height"]),
                                                                int(want["channels"])):
                failures.append(f"{tag}: size {e.width} x {e.height} (PNG {width} x {height} x {channels})")
            if list(pixels) != [int(x) for x in want["pixels"].split(",")]:
                failures.append(f"{tag}: pixels {list(pixels)} != {want['pixels']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="the run folder holding events.out.tfevents.* files")
    parser.add_argument("points", nargs="*", help="tag:step:value; default: DIR/expected.txt")
    args = parser.parse_args()

    # 0: keep every event (the default samples scalars down to 10,000 and tensors to 10).
    acc = event_accumulator.EventAccumulator(
        args.dir, size_guidance={"scalars": 0, "tensors": 0, "histograms": 0, "images": 0})
    acc.Reload()
    tags = acc.Tags()
    print("scalar tags:", sorted(tags["scalars"]))
    print("tensor tags:", sorted(tags["tensors"]))

    failures = []
    for tag, want in sorted(load_expected(args).items()):
        if tag not in tags["scalars"]:
            failures.append(f"{tag}: no such scalar tag")
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        print(f"{tag}: {sorted(got.items())}")
        if len(acc.Scalars(tag)) != len(got):
            failures.append(f"{tag}: a step appears more than once")
        if sorted(got) != sorted(want):
            failures.append(f"{tag}: steps {sorted(got)} != expected {sorted(want)}")
        for step in sorted(set(got) & set(want)):
            if f32(got[step]) != want[step]:
                failures.append(f"{tag} step {step}: {got[step]!r} != expected {want[step]!r}")

    if "hparams" in tags["tensors"]:
        event = acc.Tensors("hparams")[-1]
        text = event.tensor_proto.string_val[0].decode()
        print("hparams text summary:\n" + text)
        if not text.startswith("| key | value |"):
            failures.append("hparams: the text summary is not a markdown table")

    media = os.path.join(args.dir, "expected_media.txt")
    if os.path.exists(media):
        print("histogram tags:", sorted(tags["histograms"]), " image tags:", sorted(tags["images"]))
        check_media(acc, tags, media, failures)

    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
