//! Waking a sleeping thread through an eventfd, at most one write per
//! sleep: the sleeper raises `sleeping`, checks its rings once more, and
//! only then sleeps on the fd; a producer that pushed and finds the flag
//! raised lowers it and writes. Both sides use SeqCst, so either the
//! sleeper sees the entry or the producer sees the flag.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// An eventfd and the flag that says whether anyone sleeps on it.
#[derive(Debug)]
pub struct Wake {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl Wake {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: fd is a fresh descriptor this struct now owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// The fd to poll.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The sleeper, before its last look at the rings.
    pub fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// The sleeper, once awake (or when it found work after all).
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// A producer, after pushing: wakes the sleeper if there is one.
    pub fn notify(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.write();
        }
    }

    /// Writes the eventfd whatever the flag says.
    pub fn write(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our own eventfd; a full
        // counter (EAGAIN) still leaves it readable, which is all we need.
        let _ = unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the eventfd's readiness (non-blocking read).
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our own non-blocking fd.
        let _ = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
    }
}
