# A command that asked for a terminal (loop exec --tty): what it got, and
# whether it can type into it or reach the caller's.
import errno
import fcntl
import os
import termios


def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


print("isatty", os.isatty(0), os.isatty(1), os.isatty(2))
print("ttyname", os.ttyname(0).startswith("/dev/pts/"))
print("ctty-own", os.tcgetpgrp(0) == os.getpgrp())
print("sti-stdin", err(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x")))
fd = os.open("/dev/tty", os.O_RDWR)
os.write(fd, b"VIA-DEV-TTY\n")
print("sti-dev-tty", err(lambda: fcntl.ioctl(fd, termios.TIOCSTI, b"x")))
print("fd7", err(lambda: os.fstat(7)))
print("input", repr(os.read(0, 64)))
print("done")
