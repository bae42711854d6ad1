# One command of a task, run several times in one sandbox session: what it
# finds that an earlier command left (there must be nothing but the
# workspace's files), then leftovers of its own for the next one.
import errno
import os
import socket
import subprocess

n = int(open("count").read()) + 1 if os.path.exists("count") else 1
with open("count", "w") as f:
    f.write(str(n))
user = os.stat("/proc/self/ns/user").st_ino
left = sorted(
    f"{d}/{e}" for d in ("/dev/shm", "/run", "/tmp") for e in os.listdir(d) if e.startswith("left")
)
sleepers = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if open(f"/proc/{pid}/comm").read().strip() == "sleep":
            sleepers += 1
    except OSError:
        pass
probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    probe.connect("\0loop-session-left")
    abstract = "reached"
except OSError as e:
    abstract = errno.errorcode.get(e.errno, str(e.errno))
writes = []
for path in ("/left", "/dev/left", "/etc/left", "/usr/left"):
    try:
        open(path, "w").close()
        writes.append("ok")
    except OSError as e:
        writes.append(errno.errorcode.get(e.errno, str(e.errno)))
with open("facts.txt", "a") as f:
    print(n, user, ",".join(left) or "none", sleepers, abstract, ",".join(writes), file=f)
# Leftovers for the next command.
for d in ("/dev/shm", "/run", "/tmp"):
    open(f"{d}/left-{n}", "w").close()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0loop-session-left")
listener.listen()
subprocess.Popen(["sleep", "60"], start_new_session=True, pass_fds=[listener.fileno()])
