"""A back-end for the tree tests, started as a real process by vargr.Network.

Tags: 1 echo the packet; 2 answer base + rank; 3 an f64 array of rank + 0..3; 4 send a
point-to-point message to the next back-end, which reports it (tag 6) on the stream
named in the message; 7 never answer; 8 a thread per stream id given ("%aud"), each
waiting on that stream's notification descriptor and answering two multicasts on it with
10 * rank + k; 9 observe element p[0] until version p[1], then answer the versions seen
("%auld"); 10 rank 0 publishes versions 1..p[1] of element p[0] (8-byte version, four
times), then answers.
"""

from __future__ import annotations

import select
import threading

import numpy as np
import vargr

TAG_ECHO, TAG_RANK, TAG_ARRAY, TAG_P2P_START, TAG_P2P, TAG_P2P_REPORT, TAG_SILENT = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
)
TAG_THREADS = 8
TAG_OBSERVE = 9
TAG_PUBLISH = 10


def per_stream(be: vargr.Backend, stream: int) -> None:
    fd = be.notification_fd(stream)
    for k in range(2):
        readable, _, _ = select.select([fd], [], [], 30)
        assert readable, f"nothing on stream {stream}"
        p = be.recv_stream(stream, timeout=0)
        be.send(stream, p.tag, "%d", 10 * be.rank + k)


def main() -> None:
    be = vargr.Backend.attach()
    for p in be:
        if p.tag == TAG_ECHO:
            be.send(p, p.tag, p.format, *p.values)
        elif p.tag == TAG_RANK:
            be.send(p, p.tag, "%d", p[0] + be.rank)
        elif p.tag == TAG_ARRAY:
            values = np.arange(4, dtype=np.float64) + be.rank
            be.send(p, p.tag, "%alf", values)
        elif p.tag == TAG_P2P_START:
            dest = (be.rank + 1) % be.num_backends
            be.send_to(dest, TAG_P2P, "%ud %ud", p.stream, be.rank)
        elif p.tag == TAG_P2P:
            stream, sender = p.values
            be.send(stream, TAG_P2P_REPORT, "%ud %ud", sender, be.rank)
        elif p.tag == TAG_THREADS:
            threads = [threading.Thread(target=per_stream, args=(be, int(s))) for s in p.values[0]]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        elif p.tag == TAG_OBSERVE:
            element, last = p.values
            seen: list[int] = []
            while not seen or seen[-1] < last:
                version, value = be.observe_newer(element, seen[-1] if seen else None, timeout=30)
                assert value == version.to_bytes(8, "little") * 4, (version, value)
                seen.append(version)
            be.send(p, p.tag, "%auld", np.array(seen, dtype=np.uint64))
        elif p.tag == TAG_PUBLISH:
            element, last = p.values
            if be.rank == 0:
                for version in range(1, last + 1):
                    be.publish(element, version, version.to_bytes(8, "little") * 4)
            be.send(p, p.tag, "%d", be.rank)


if __name__ == "__main__":
    main()
