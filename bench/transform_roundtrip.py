"""What one round trip of a batch to a transform process costs, alone: the
protocol of ``transform_processes.py`` against a bare ping-pong that
carries the same arrays' places and nothing else. What bench/README.md
("Transforms in processes") quotes.

    bench/.venv/bin/python bench/transform_roundtrip.py [BATCH]

Takes one batch of BATCH samples (2048 by default) from the loader of
`transform_micro.py`'s table, gathered into shared memory as for
processes, then sends it 5,000 times to one process running `identity`
and waits for each reply, 5 rounds: prints the median round trip, wall
time and the CPU time of each side (user and system). Then the same
through the floor: a socket carrying four numbers each way, the process
making the batch's two arrays from a shared mapping, the parent making
them again from the reply. The difference is the work of the protocol
beyond that (its message packed and unpacked on both sides, the shared
buffers' bookkeeping, the process's loop).
"""

import mmap
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import time

import numpy as np

import loaderx
from loaderx.batch_work import BatchWork
from loaderx.transform_processes import TransformProcesses
from transform_micro import TABLE, identity, process_cpu

ROUNDS, TRIPS = 5, 5000
HEADER = struct.Struct("<QQQQ")


def timed(trip, child):
    """Median over the rounds of (wall, parent user, parent system, child
    user, child system) per trip, in µs."""
    rounds = []
    for _ in range(ROUNDS):
        parent, kid, start = os.times(), process_cpu(child), time.perf_counter()
        for _ in range(TRIPS):
            trip()
        wall = time.perf_counter() - start
        parent2, kid2 = os.times(), process_cpu(child)
        rounds.append([wall, parent2[0] - parent[0], parent2[1] - parent[1],
                       kid2[0] - kid[0], kid2[1] - kid[1]])
    return [statistics.median(r[i] for r in rounds) / TRIPS * 1e6 for i in range(5)]


def report(what, us):
    print(f"{what:9s} round trip {us[0]:5.1f} µs; parent user {us[1]:4.1f} system {us[2]:4.1f}; "
          f"process user {us[3]:4.1f} system {us[4]:4.1f}")


def protocol(batch, seeds):
    processes = TransformProcesses(BatchWork(identity, None, False, False), 1, None)
    p = processes.all[0]

    def trip():
        p.load(batch, seeds, None)
        p.post()
        while not p.reply(True):
            pass
        p.result()
        p.sent = 0

    try:
        return timed(trip, p.process.pid)
    finally:
        processes.close()


def serve(sock, fd, shapes):
    memory = mmap.mmap(fd, 0)
    header = bytearray(HEADER.size)
    while sock.recv_into(header) == HEADER.size:
        seq, image, label, _ = HEADER.unpack(header)
        if not seq:
            return
        batch = {"image": np.ndarray(shapes[0], np.uint8, memory, image),
                 "label": np.ndarray(shapes[1], np.int64, memory, label)}
        identity(batch)
        sock.sendall(HEADER.pack(seq, image, label, 0))


def floor(batch):
    fd = os.memfd_create("roundtrip")
    os.ftruncate(fd, 4 << 20)
    memory = mmap.mmap(fd, 0)
    shapes = (batch["image"].shape, batch["label"].shape)
    label_at = -(-batch["image"].nbytes // 64) * 64
    ours, theirs = socket.socketpair()
    child = multiprocessing.get_context("fork").Process(target=serve, args=(theirs, fd, shapes))
    child.start()
    header = bytearray(HEADER.size)

    def trip():
        ours.sendall(HEADER.pack(1, 0, label_at, 0))
        ours.recv_into(header)
        _, image, label, _ = HEADER.unpack(header)
        np.ndarray(shapes[0], np.uint8, memory, image)
        np.ndarray(shapes[1], np.int64, memory, label).copy()

    try:
        return timed(trip, child.pid)
    finally:
        ours.sendall(HEADER.pack(0, 0, 0, 0))
        child.join()


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    with loaderx.DataLoader(loaderx.Table(TABLE, read_only=True), batch_size=size,
                            num_workers=2, transform=identity, transform_workers=1,
                            transform_mode="process") as loader:
        pipeline = loader._pool
        batch, seeds, _ = pipeline.prepare(next(pipeline.native))
        report("protocol", protocol(batch, seeds))
    report("floor", floor(batch))


if __name__ == "__main__":
    main()
