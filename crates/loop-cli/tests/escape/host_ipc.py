# The host's side of the IPC test: make a SysV segment holding a secret,
# check that objects a sandboxed command made did not outlive it, clean up.
import ctypes
import errno
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT, IPC_RMID, O_RDONLY = 0o1000, 0, 0
cmd, key = sys.argv[1], int(sys.argv[2])
if cmd == "create":
    shm = libc.shmget(key, 4096, IPC_CREAT | 0o600)
    addr = libc.shmat(shm, None, 0)
    ctypes.memmove(addr, b"HOST-SECRET-4e1c", 16)
    print(shm)
elif cmd == "check":
    shm = libc.shmget(key, 0, 0)
    print("shm", "found" if shm >= 0 else errno.errorcode[ctypes.get_errno()])
    q = libc.mq_open(sys.argv[3].encode(), O_RDONLY)
    print("mq", "found" if q >= 0 else errno.errorcode[ctypes.get_errno()])
    if q >= 0:
        libc.mq_unlink(sys.argv[3].encode())
elif cmd == "remove":
    print(libc.shmctl(int(sys.argv[3]), IPC_RMID, None))
