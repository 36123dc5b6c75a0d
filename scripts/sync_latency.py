#!/usr/bin/env python3
"""How long fdatasync takes on this machine, alone and with three processes at once:
each process appends 200 bytes and syncs, for 2 s. Usage: python3 scripts/sync_latency.py
(writes 64 MiB files $DIR/tmp-sync-N, default the current directory, removed after)."""
import os, sys, time, multiprocessing as mp
def worker(i, secs, q):
    fn = os.path.join(os.environ.get("DIR", "."), "tmp-sync-%d" % i)
    fd = os.open(fn, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"\0" * (64 << 20)); os.fdatasync(fd)
    lat = []; off = 0; end = time.time() + secs
    while time.time() < end:
        os.pwrite(fd, b"x" * 200, off); off += 200
        t = time.perf_counter(); os.fdatasync(fd); lat.append(time.perf_counter() - t)
    os.close(fd); os.unlink(fn)
    lat.sort(); q.put((len(lat), lat[len(lat)//2]*1e6, lat[int(len(lat)*.99)]*1e6))
for n in (1, 3, 1, 3):
    q = mp.Queue(); ps = [mp.Process(target=worker, args=(i, 2, q)) for i in range(n)]
    [p.start() for p in ps]; [p.join() for p in ps]
    rs = [q.get() for _ in ps]
    print(n, "processes:", ["%d syncs, p50 %.0f us, p99 %.0f us" % r for r in rs])
