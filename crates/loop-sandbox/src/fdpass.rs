//! Handing a descriptor from the child to the runtime over a socket pair
//! (`SCM_RIGHTS`): the egress proxy's listening socket, made inside the
//! command's network namespace, and the command's disk, a tmpfs mounted
//! inside its mount namespace, whose writes the runtime reads after the
//! command has ended.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A socket pair: the runtime's end and the child's (both close-on-exec).
pub(crate) fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socket_pair_of(libc::SOCK_STREAM)
}

/// A socket pair of this type (`SOCK_STREAM`, `SOCK_SEQPACKET`), both
/// ends close-on-exec.
pub(crate) fn socket_pair_of(kind: libc::c_int) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Receive the descriptor the child sends (waiting up to `wait`); `None`
/// when the child closed its end without sending one.
pub(crate) fn receive(ours: &OwnedFd, wait: Duration) -> Option<OwnedFd> {
    let mut pfd = libc::pollfd {
        fd: ours.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on a descriptor we own.
    if unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) } <= 0 {
        return None;
    }
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into the buffers above; CMSG_* walk that buffer only.
    unsafe {
        if libc::recvmsg(ours.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) <= 0 {
            return None;
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd: RawFd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
        Some(OwnedFd::from_raw_fd(fd))
    }
}

/// In the child: send `fd` over `pair` (neither is closed).
///
/// # Safety
/// Between fork and exec: only async-signal-safe system calls on stack data.
pub(crate) unsafe fn send(pair: RawFd, fd: RawFd) -> bool {
    // SAFETY: sendmsg on stack data.
    unsafe {
        let mut byte = [b'F'];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(pair, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// A message header over one buffer and `space` bytes of `control`.
pub(crate) fn header(iov: &mut libc::iovec, control: &mut [u64], space: usize) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    msg
}

/// The descriptors (up to `max`) one message on `sock` carries (none
/// when it closed or the message was cut short).
pub(crate) fn recv_fds(sock: &OwnedFd, max: usize) -> Vec<OwnedFd> {
    let mut data = [0u8; 8];
    loop {
        let (n, fds, cut) = recv_msg(sock.as_raw_fd(), &mut data, max);
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return if cut { Vec::new() } else { fds };
    }
}

/// Whether `fd` became readable (or its peer went away) within `wait`.
pub(crate) fn readable_within(fd: RawFd, wait: Duration) -> bool {
    let end = std::time::Instant::now() + wait;
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let left = end.saturating_duration_since(std::time::Instant::now());
        let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        // SAFETY: poll on one descriptor the caller holds open.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            n if n > 0 => return true,
            0 if std::time::Instant::now() >= end => return false,
            0 => {}
            // An error is for the read that follows to say.
            _ if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted => {
                return true;
            }
            _ => {}
        }
    }
}

/// One `recv` of a message on a `SOCK_SEQPACKET` socket `fd` into `buf`:
/// its length, 0 only once the peer has gone and nothing it sent is left.
/// Linux answers a read by looking at the queue, then, finding it empty,
/// at whether the peer has gone (without a lock between the two): a peer
/// that sends its last message and closes between them makes the read
/// answer 0 with the message queued. And a peer that closes with a
/// message of ours unread (a `K` the spawner had not yet heard) makes our
/// next read answer `ECONNRESET` before it looks at the queue at all. So
/// either is read again once, without waiting: the peer has gone for good
/// by then, anything it sent is in the queue, and the error is cleared by
/// being told. (No side of these sockets ever sends an empty message,
/// which would also read as 0.)
pub(crate) fn recv_packet(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> isize {
    // SAFETY: recv into a buffer we own, of its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    let reset =
        || n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECONNRESET);
    if n != 0 && !reset() {
        return n;
    }
    // SAFETY: as above.
    unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) }
}

/// One `recvmsg` on `fd` into `data`, with room for `max` descriptors:
/// its return, the descriptors it carried (owned, close-on-exec), and
/// whether they were cut short.
pub(crate) fn recv_msg(fd: RawFd, data: &mut [u8; 8], max: usize) -> (isize, Vec<OwnedFd>, bool) {
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE((max * 4) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut msg = header(&mut iov, &mut control, space);
    let mut fds = Vec::new();
    // SAFETY: recvmsg into the buffers `msg` points at, which outlive the
    // call; CMSG_* walk the control buffer only; every descriptor
    // received is owned.
    unsafe {
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n <= 0 {
            return (n, fds, false);
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let len = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..len / 4 {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        (n, fds, msg.msg_flags & libc::MSG_CTRUNC != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(fd: &OwnedFd, bytes: &[u8]) {
        // SAFETY: send from a buffer we own on a socket we hold.
        let n = unsafe { libc::send(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
        assert_eq!(n, bytes.len() as isize);
    }

    #[test]
    fn a_peers_last_message_is_read_before_its_end() {
        let (ours, theirs) = socket_pair_of(libc::SOCK_SEQPACKET).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            recv_packet(ours.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT),
            -1,
            "nothing sent yet: EAGAIN"
        );
        send(&theirs, b"X1234");
        drop(theirs);
        assert_eq!(
            recv_packet(ours.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT),
            5
        );
        assert_eq!(&buf[..5], b"X1234");
        assert_eq!(
            recv_packet(ours.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT),
            0
        );
        assert_eq!(recv_packet(ours.as_raw_fd(), &mut buf, 0), 0);
    }

    /// A peer that closes with a message of ours unread (the spawner
    /// forgetting a command whose runtime had just asked it to kill it)
    /// makes our next read answer `ECONNRESET` before the queue: its last
    /// message is still read, then its end.
    #[test]
    fn a_peer_closing_with_our_message_unread_still_gives_its_last() {
        for flags in [0, libc::MSG_DONTWAIT] {
            let (ours, theirs) = socket_pair_of(libc::SOCK_SEQPACKET).unwrap();
            send(&ours, b"K1234");
            send(&theirs, b"X1234");
            drop(theirs);
            let mut buf = [0u8; 8];
            assert_eq!(recv_packet(ours.as_raw_fd(), &mut buf, flags), 5);
            assert_eq!(&buf[..5], b"X1234");
            assert_eq!(recv_packet(ours.as_raw_fd(), &mut buf, flags), 0);
        }
    }

    /// A reader that does not wait, racing a peer that sends its last
    /// message and closes (as the spawner answers a command's end and
    /// forgets it): the message is read every time, never an end before
    /// it. Linux answers such a read 0 with the message queued about 4
    /// times in 10,000 on the 2-core VM (a plain `recv` in the same loop,
    /// in C), seen under load as "the spawner ended before the command".
    #[test]
    fn a_message_sent_as_its_peer_closes_is_never_lost_to_a_read_that_does_not_wait() {
        for _ in 0..10_000 {
            let (ours, theirs) = socket_pair_of(libc::SOCK_SEQPACKET).unwrap();
            let peer = std::thread::spawn(move || {
                send(&theirs, b"X1234");
                drop(theirs);
            });
            let mut buf = [0u8; 8];
            let n = loop {
                let n = recv_packet(ours.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT);
                if n != -1 {
                    break n;
                }
                std::hint::spin_loop();
            };
            peer.join().unwrap();
            assert_eq!((n, &buf[..5]), (5, &b"X1234"[..]));
        }
    }
}
