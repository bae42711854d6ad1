# Inside the sandbox: look for the host's segment, then make objects of
# our own that must not outlive the command.
import ctypes
import errno
import sys

libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, O_CREAT, O_RDWR = 0o1000, 0o100, 0o2
host_key, own_key, queue = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
shm = libc.shmget(host_key, 0, 0)
print("host-shm", "found" if shm >= 0 else errno.errorcode[ctypes.get_errno()])
with open("/proc/sysvipc/shm") as f:
    print("listed", len(f.read().splitlines()) - 1)
own = libc.shmget(own_key, 48 << 20, IPC_CREAT | 0o600)
print("own-shm", "made" if own >= 0 else errno.errorcode[ctypes.get_errno()])
q = libc.mq_open(queue.encode(), O_CREAT | O_RDWR, 0o600, None)
print("own-mq", "made" if q >= 0 else errno.errorcode[ctypes.get_errno()])
