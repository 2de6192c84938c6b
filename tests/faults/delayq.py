#!/usr/bin/env python3
"""Packet delay and loss without tc netem: an NFQUEUE consumer that holds each packet for a
while before accepting it, and drops some.

  delayq.py --queue N --delay-ms 50 [--jitter-ms 10] [--loss-pct 1] [--seed S]
  delayq.py --queue N --probe      # exit 0 when nfnetlink_queue can be bound here

faultnet.Link.netem() uses it where the kernel has no sch_netem (e.g. Firecracker guest
kernels) but has iptables' NFQUEUE target: it runs inside a server's network namespace, and
`iptables -A INPUT -i eth0 -j NFQUEUE` / `-A OUTPUT -o eth0 ...` hand every packet of that
server's link to it, both ways, so each direction gets the delay and the loss, as netem on
both veth ends would. It speaks the nfnetlink_queue protocol over a raw netlink socket
(no library needed).

Differences from netem: packets leave in the order they came (a packet's release time is at
least its predecessor's), so jitter never reorders; the delay is applied in userspace, with
a resolution of about a millisecond. Prints "ready" once bound; stops on SIGTERM.
Single-threaded.
"""
import argparse
import collections
import errno
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = (NFNL_SUBSYS_QUEUE << 8) | 0
NFQNL_MSG_VERDICT = (NFNL_SUBSYS_QUEUE << 8) | 1
NFQNL_MSG_CONFIG = (NFNL_SUBSYS_QUEUE << 8) | 2
NFQNL_MSG_VERDICT_BATCH = (NFNL_SUBSYS_QUEUE << 8) | 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NLA_TYPE_MASK = 0x3FFF
# Packets a queue may hold: a 50 ms delay at ~1 Gbit/s of 1500-byte frames is ~4000; the
# kernel's default (1024) would drop the excess, which is loss nobody asked for.
QUEUE_MAXLEN = 65536
RCVBUF = 16 << 20  # the kernel's messages wait here while we sleep to the next release.


def _attr(kind, data):
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * ((4 - length % 4) % 4)


class Queue:
    def __init__(self, num):
        self.num = num
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.bind((0, 0))
        self.seq = 0

    def _send(self, kind, attrs, flags=NLM_F_REQUEST):
        self.seq += 1
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(self.num)) + attrs
        self.sock.send(struct.pack("=IHHII", 16 + len(body), kind, flags, self.seq, 0) + body)

    def _ack(self):
        data = self.sock.recv(65536)
        _, kind, _, _, _ = struct.unpack_from("=IHHII", data)
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", data, 16)
            if err:
                raise OSError(-err, f"nfnetlink_queue config: {os.strerror(-err)}")

    def bind(self):
        self._send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0)),
                   NLM_F_REQUEST | NLM_F_ACK)
        self._ack()
        self._send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
                   + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN)),
                   NLM_F_REQUEST | NLM_F_ACK)
        self._ack()

    def packet_ids(self, data):
        """The ids of the packets in one recv's worth of netlink messages."""
        ids, off = [], 0
        while off + 16 <= len(data):
            length, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
            if length < 16:
                break
            if kind == NFQNL_MSG_PACKET:
                a = off + 20  # after nlmsghdr (16) and nfgenmsg (4)
                while a + 4 <= off + length:
                    alen, akind = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if akind & NLA_TYPE_MASK == NFQA_PACKET_HDR:
                        ids.append(struct.unpack_from(">I", data, a + 4)[0])
                    a += (alen + 3) & ~3
            off += (length + 3) & ~3
        return ids

    def verdict(self, packet_id, verdict):
        self._send(NFQNL_MSG_VERDICT, _attr(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id)))

    def accept_upto(self, packet_id):
        """Accepts every packet still queued whose id is at most packet_id."""
        self._send(NFQNL_MSG_VERDICT_BATCH, _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id)))


def run(a):
    rng = random.Random(a.seed)
    q = Queue(a.queue)
    q.bind()
    print("ready", flush=True)
    held = collections.deque()  # (release time, id), release times non-decreasing.
    last_release = 0.0
    while True:
        now = time.monotonic()
        due = None
        while held and held[0][0] <= now:
            due = held.popleft()[1]
        if due is not None:
            q.accept_upto(due)
        timeout = max(0.0, held[0][0] - now) if held else None
        if not select.select([q.sock], [], [], timeout)[0]:
            continue
        try:
            data = q.sock.recv(1 << 20)
        except OSError as e:
            if e.errno == errno.ENOBUFS:  # messages lost; their packets wait for a batch verdict.
                continue
            raise
        now = time.monotonic()
        for pid in q.packet_ids(data):
            if a.loss_pct and rng.random() * 100 < a.loss_pct:
                q.verdict(pid, NF_DROP)
                continue
            delay = a.delay_ms + (rng.gauss(0, a.jitter_ms) if a.jitter_ms else 0)
            last_release = max(last_release, now + max(0.0, delay) / 1000)
            held.append((last_release, pid))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--jitter-ms", type=float, default=0)
    p.add_argument("--loss-pct", type=float, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--probe", action="store_true", help="bind the queue and exit: 0 if it works")
    a = p.parse_args()
    if a.probe:
        Queue(a.queue).bind()
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(a)


if __name__ == "__main__":
    main()
