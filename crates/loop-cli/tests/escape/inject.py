# A hostile command: tries every way to type into a terminal.
import ctypes
import errno
import fcntl
import os
import platform
import termios

libc = ctypes.CDLL(None, use_errno=True)
TEXT = b"touch TYPED-MARK\n"


def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def push(fd):
    for b in TEXT:
        fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))


print("open-tty", err(lambda: os.open("/dev/tty", os.O_RDWR)))
for fd in range(0, 256):
    if err(lambda: push(fd)) == "ok":
        print("pushed-into", fd)
print("fd7", err(lambda: os.fstat(7)))
print("sti-devnull", err(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x")))
if platform.machine() == "x86_64":
    r = libc.syscall(16, 0, ctypes.c_ulong(0x100005412), b"x")
    print("sti-high-bits", errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok")
    # ioctl under its x32 number (514).
    r = libc.syscall(0x40000000 | 514, 0, ctypes.c_ulong(0x5412), b"x")
    print("sti-x32", errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok")
print("linux", err(lambda: fcntl.ioctl(0, 0x541C, b"\x02")))
print("done")
