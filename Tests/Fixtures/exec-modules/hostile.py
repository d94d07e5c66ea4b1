#!/usr/bin/env python3
# Exec modules that misbehave, one per mode (ExecModuleTests); each reads the hello first.
import os
import signal
import sys
import time

mode = sys.argv[1]
hello = sys.stdin.buffer.readline()
out = sys.stdout.buffer


def line(text):
    out.write(text.encode() + b"\n")
    out.flush()


if mode == "garbage":
    # Not JSON, JSON of the wrong shape, an unknown type, a bad name, a 100 MB line: each one
    # counted and logged; the module goes on and its last post arrives.
    line("this is not json")
    line("[1, 2, 3]")
    line('{"type":"dance"}')
    line('{"type":"post","name":"bad..name"}')
    chunk = b"x" * (1 << 20)
    for _ in range(100):
        out.write(chunk)
    out.write(b"\n")
    out.flush()
    line('{"type":"post","name":"hostile.after","fields":{"mode":"garbage"}}')
    for _ in sys.stdin.buffer:
        pass
elif mode == "flood":
    # Posts as fast as it can: the host's allowance drops what is over, counted.
    for n in range(50000):
        out.write(b'{"type":"post","name":"hostile.flood","fields":{"n":%d}}\n' % n)
    out.flush()
    for _ in sys.stdin.buffer:
        pass
elif mode == "stderr-flood":
    # A line of 100 KB and 100 000 short ones on standard error, then a post: the log stays
    # bounded (the long line first: past the log limit, its notice would be left out too).
    err = sys.stderr.buffer
    err.write(b"y" * 102400 + b"\n")
    for n in range(100000):
        err.write(b"line %d\n" % n)
    err.flush()
    line('{"type":"post","name":"hostile.after","fields":{"mode":"stderr-flood"}}')
    for _ in sys.stdin.buffer:
        pass
elif mode == "deaf":
    # Never reads its input again.
    line('{"type":"log","message":"deaf: not reading"}')
    while True:
        time.sleep(1000)
elif mode == "closes-stdout":
    os.close(1)
    while True:
        time.sleep(1000)
elif mode == "forks":
    # Three children that would live on (holding its output), their pids in a file; then exits.
    pids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            time.sleep(1000)
            os._exit(0)
        pids.append(pid)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    sys.exit(0)
elif mode == "exits":
    # Exits with status 3 at its first event.
    sys.stdin.buffer.readline()
    sys.exit(3)
elif mode == "ignores-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    while True:
        time.sleep(1000)
else:
    sys.exit("unknown mode " + mode)
