//! Saving the input that kills the runner outright.
//!
//! `catch_unwind` sees panics only. A failed allocation (a decoder trusting a length
//! field), a stack overflow or a failed assertion in C code (zstd) aborts the process;
//! without this the run would end with the input lost. Before each input the runner
//! publishes it here; a signal handler writes it to `artifacts/NAME/crash-HASH` with
//! async-signal-safe calls only, says so, and lets the signal kill the process.

use std::ffi::CString;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

static INPUT: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
/// `artifacts/NAME/crash-` as a C string (leaked: it lives as long as the target runs).
static PREFIX: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// Where a fatal signal saves the input: `dir` (created) and `crash-HASH` in it.
pub fn set_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let p = CString::new(format!("{}/crash-", dir.display())).map_err(std::io::Error::other)?;
    let old = PREFIX.swap(p.into_raw(), Ordering::SeqCst);
    if !old.is_null() {
        // SAFETY: made by `CString::into_raw` above; no handler runs between inputs.
        drop(unsafe { CString::from_raw(old) });
    }
    Ok(())
}

/// The input about to run; it must stay alive until the next call.
pub fn set_input(data: &[u8]) {
    INPUT.store(data.as_ptr().cast_mut(), Ordering::SeqCst);
    INPUT_LEN.store(data.len(), Ordering::SeqCst);
}

/// Installs the handler for the signals an abort, a stack overflow or a wild access
/// raise; on the alternate stack Rust sets up, so that it runs after an overflow too.
pub fn install() {
    for sig in [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL] {
        // SAFETY: a zeroed sigaction with a handler of the right signature.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_ONSTACK | libc::SA_RESETHAND;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn say(msg: &[u8]) {
    // SAFETY: write(2) is async-signal-safe.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

extern "C" fn on_signal(sig: libc::c_int) {
    let ptr = INPUT.load(Ordering::SeqCst);
    let len = INPUT_LEN.load(Ordering::SeqCst);
    let prefix = PREFIX.load(Ordering::SeqCst);
    if !ptr.is_null() && !prefix.is_null() {
        // SAFETY: set_input's contract keeps the input alive while it runs.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        // The prefix, 16 hex digits, a NUL: built without allocating.
        let mut path = [0u8; 4096];
        // SAFETY: PREFIX is a valid C string.
        let p = unsafe { std::ffi::CStr::from_ptr(prefix) }.to_bytes();
        if p.len() + 17 <= path.len() {
            path[..p.len()].copy_from_slice(p);
            for i in 0..16 {
                path[p.len() + i] = b"0123456789abcdef"[(h >> (60 - 4 * i)) as usize & 15];
            }
            // SAFETY: open/write/close are async-signal-safe; path is NUL-terminated.
            unsafe {
                let fd = libc::open(
                    path.as_ptr().cast(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::write(fd, data.as_ptr().cast(), data.len());
                    libc::close(fd);
                }
            }
            say(b"\nFAIL: a fatal signal killed the runner; input saved to ");
            say(&path[..p.len() + 16]);
            say(b"\n");
        }
    }
    // SA_RESETHAND restored the default action: raising again kills the process with
    // this signal, as if nothing had been caught.
    // SAFETY: raise(3) is async-signal-safe.
    unsafe { libc::raise(sig) };
}
