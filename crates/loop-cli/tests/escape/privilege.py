# Inside the sandbox: every way to leave a file that gives privilege on the
# host, and the honest modes that must still work.
import ctypes
import errno
import os
import platform
import shutil

libc = ctypes.CDLL(None, use_errno=True)


def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


shutil.copy("/bin/sh", "suid-sh")
print("chmod-4755", err(lambda: os.chmod("suid-sh", 0o4755)))
print("chmod-2755", err(lambda: os.chmod("suid-sh", 0o2755)))
X86_64 = platform.machine() == "x86_64"
if X86_64:
    # chmod with the mode's high bits set (the kernel reads 16 of them).
    r = libc.syscall(90, b"suid-sh", ctypes.c_ulong(0x1000009ED))
    print("chmod-u+s-high", "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
    # The same chmod under its x32 number.
    r = libc.syscall(0x40000000 | 90, b"suid-sh", ctypes.c_ulong(0o4755))
    print("chmod-x32", "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
fd = os.open("suid-sh", os.O_RDONLY)
print("fchmod-4755", err(lambda: os.fchmod(fd, 0o4755)))
print("open-creat-4755", err(lambda: os.open("made-suid", os.O_CREAT | os.O_WRONLY, 0o4755)))
print("mknod-4755", err(lambda: os.mknod("node-suid", 0o100000 | 0o4755)))
if X86_64:
    r = libc.syscall(437, -100, b"o2", ctypes.c_void_p(0), 0)
    print("openat2", errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok")
print("fchmodat-4755", err(lambda: os.chmod("suid-sh", 0o4755, dir_fd=os.open(".", os.O_RDONLY))))
print("nested-userns", "ok" if os.system("unshare -U true 2>/dev/null") == 0 else "refused")
caps = bytes([0, 0, 0, 2, 0x80, 0, 0, 0, 0x80, 0, 0, 0] + [0] * 8)
print("setcap", err(lambda: os.setxattr("suid-sh", "security.capability", caps)))
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh")):
            print(line.strip().replace("\t", " "))
print("nosuid", bool(os.statvfs(".").f_flag & os.ST_NOSUID))
print("chmod-755", err(lambda: os.chmod("suid-sh", 0o755)))
print("open-creat-644", err(lambda: os.open("plain", os.O_CREAT | os.O_WRONLY, 0o644)))
print("done")
