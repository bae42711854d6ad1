# A terminal pane, as a person's would be: runs the command given with a
# pseudo-terminal as its controlling terminal (and, as a careless caller
# might, the terminal also open on descriptor 7), then reports whether
# anything was pushed into the terminal's input while it ran. With
# HARNESS_CONTROL=1 the pane itself pushes a byte first (the positive
# control: the report must show it).
import os
import pty
import select
import sys
import tty

argv = sys.argv[1:]
pid, master = pty.fork()
if pid == 0:
    tty.setraw(0)
    fd = os.open("/dev/tty", os.O_RDWR)
    os.dup2(fd, 7)
    os.set_inheritable(7, True)
    if os.environ.get("HARNESS_CONTROL") == "1":
        import fcntl
        import termios

        fcntl.ioctl(0, termios.TIOCSTI, b"Z")
    rc = os.spawnvp(os.P_WAIT, argv[0], argv)
    ready, _, _ = select.select([0], [], [], 0.5)
    pending = os.read(0, 4096) if ready else b""
    os.write(1, b"\nHARNESS exit=%d pending=%r\n" % (rc, pending))
    os._exit(0)
out = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
