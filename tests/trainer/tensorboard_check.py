#!/usr/bin/env python3
"""Reads a run folder written by kiln's TensorBoardLogger with TensorBoard's own loader and checks its scalars.

An independent check of the event-file writer (framing, CRCs, protobuf encoding, the resume purge), run by hand;
the C++ test suite does not need Python. Usage:

    KILN_KEEP_TFEVENTS=/tmp/tb ./kiln_trainer_io_tests --gtest_filter='*IndependentCheck*'
    python3 tests/trainer/tensorboard_check.py /tmp/tb/check/version_0            # uses DIR/expected.txt
    python3 tests/trainer/tensorboard_check.py DIR train/loss:3:0.25 val/acc:0:0   # or tag:step:value points

expected.txt holds one `tag step value` line per point. Every listed tag must have exactly the listed points
after TensorBoard's purge of steps a resume discarded; values compare as float32. Exits 1 on any mismatch.
"""
import argparse
import os
import struct
import sys

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="the run folder holding events.out.tfevents.* files")
    parser.add_argument("points", nargs="*", help="tag:step:value; default: DIR/expected.txt")
    args = parser.parse_args()

    # 0: keep every event (the default samples scalars down to 10,000 and tensors to 10).
    acc = event_accumulator.EventAccumulator(args.dir, size_guidance={"scalars": 0, "tensors": 0})
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

    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
