# One command of a task, run several times in one sandbox session: what
# it finds of the network namespace it was given (nothing of an earlier
# command's: no packet counted, no socket, no flow label, its port free,
# `lo` up), what comes of its attempts to change that namespace for the
# next command, and leftovers for the next: on its third run (argument
# `sockets`) a connection whose TIME_WAIT holds a port and a listening
# abstract socket kept alive only by a descriptor in flight; on its second
# (argument `label`) an IPv6 flow label left to linger, with no packet
# sent and no socket left.
import array
import errno
import fcntl
import os
import socket
import struct
import sys

PORT = 47113
NAME = "\0loop-session-net-left"


def code(e):
    return errno.errorcode.get(e.errno, str(e.errno))


n = int(open("net-count").read()) + 1 if os.path.exists("net-count") else 1
with open("net-count", "w") as f:
    f.write(str(n))
net = os.stat("/proc/self/ns/net").st_ino
lo = [l for l in open("/proc/self/net/dev") if l.strip().startswith("lo:")][0]
counted = sum(int(x) for x in lo.split(":", 1)[1].split())
unix = len(open("/proc/self/net/unix").read().splitlines()) - 1
tcp = sum(len(open(f"/proc/self/net/{t}").read().splitlines()) - 1 for t in ("tcp", "tcp6"))
lo_up = int(open("/sys/class/net/lo/flags").read(), 16) & 1
labels = len(open("/proc/self/net/ip6_flowlabel").read().splitlines()) - 1
# Honest work: a server on a fixed port, without SO_REUSEADDR.
s = socket.socket()
try:
    s.bind(("127.0.0.1", PORT))
    bound = "bound"
except OSError as e:
    bound = code(e)
s.close()
probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    probe.connect(NAME)
    abstract = "reached"
except OSError as e:
    abstract = code(e)
probe.close()
# Attempts to change the namespace for whoever comes next: `lo` down, a
# network setting.
changes = []
ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    fcntl.ioctl(ctl, 0x8914, struct.pack("16sH14x", b"lo", 0))  # SIOCSIFFLAGS
    changes.append("ok")
except OSError as e:
    changes.append(code(e))
ctl.close()
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write("40000 40001\n")
    changes.append("ok")
except OSError as e:
    changes.append(code(e))
with open("net-facts.txt", "a") as f:
    print(n, net, counted, unix, tcp, lo_up, bound, abstract, labels, ",".join(changes), file=f)
if sys.argv[1] == "label" and n == 2:
    # A label shared with anyone, lingering a minute after its socket.
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    req = socket.inet_pton(socket.AF_INET6, "::1") + struct.pack(
        "!I", 0x12345
    ) + struct.pack("=BBHHHI", 0, 255, 1, 0, 60, 0)  # GET, share ANY, CREATE; linger 60 s
    s.setsockopt(socket.IPPROTO_IPV6, 32, req)  # IPV6_FLOWLABEL_MGR
    s.close()
if sys.argv[1] == "sockets" and n == 3:
    # The server closes first: its side of the connection stays in
    # TIME_WAIT on PORT for a minute.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", PORT))
    server.listen()
    client = socket.create_connection(("127.0.0.1", PORT))
    conn, _ = server.accept()
    conn.close()
    client.recv(1)
    client.close()
    server.close()
    # A listener whose only holder is a message in flight in a pair that
    # holds itself.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(NAME)
    listener.listen()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    held = array.array("i", [listener.fileno(), a.fileno(), b.fileno()])
    a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, held)])
    for sock in (listener, a, b):
        sock.close()
