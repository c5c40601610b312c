//! Acting as the caller: each system call a brick makes on a user's behalf
//! (a lookup in a directory, a creation, a removal, a rename, an open, a
//! change of attributes or xattrs) runs with the thread's file-system
//! identity set to the caller's (fsuid, fsgid and supplementary groups), so
//! that the kernel checks it exactly as for a local process: modes, ACLs,
//! the sticky bit, ownership rules, protected hard links. What the brick
//! keeps for itself (`.mortar/`, its `trusted.mortar.*` xattrs, owners set
//! on new objects) stays root's. mortar's own requests (`Ctx::internal`,
//! honoured only from the pool's servers) and root run as the brick.
//!
//! The identity is the calling thread's alone: `setfsuid`/`setfsgid` are
//! per thread, and groups are set with the raw `setgroups` system call
//! (the C library's wrapper changes every thread of the process). No
//! await happens between setting and restoring it.

use mortar_core::{Ctx, FsError, FsResult};
use std::sync::OnceLock;

/// The brick's own identity, put back after each call.
struct Own {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

fn own() -> &'static Own {
    static OWN: OnceLock<Own> = OnceLock::new();
    OWN.get_or_init(|| Own {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        groups: rustix::process::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default(),
    })
}

/// Whether a call for `cx` runs as `cx` (else as the brick).
pub(super) fn switches(cx: &Ctx) -> bool {
    // A brick that is not root can act as no one else: it has its own
    // rights only, and every caller gets at most those.
    cx.uid != 0 && !cx.internal && own().uid == 0
}

/// Runs `f` as the caller `cx` (see the module's comment).
pub(super) fn as_caller<T>(cx: &Ctx, f: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
    if !switches(cx) {
        return f();
    }
    let _as = Become::new(cx)?;
    f()
}

/// The thread's file-system identity set to a caller's until dropped.
struct Become;

fn set_groups(groups: &[u32]) -> std::io::Result<()> {
    // SAFETY: the kernel reads `groups.len()` gids from the pointer.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Become {
    fn new(cx: &Ctx) -> FsResult<Become> {
        set_groups(&cx.groups).map_err(|e| {
            FsError::new(
                libc::EINVAL,
                format!("cannot take the caller's {} groups: {e}", cx.groups.len()),
            )
        })?;
        let guard = Become;
        // SAFETY: plain system calls on this thread's credentials.
        unsafe {
            libc::setfsgid(cx.gid);
            libc::setfsuid(cx.uid);
        }
        // setfsuid answers the previous id and no error: ask again.
        let (uid, gid) = unsafe { (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX)) };
        if (uid as u32, gid as u32) != (cx.uid, cx.gid) {
            return Err(FsError::new(
                libc::EPERM,
                format!("cannot act as uid {} gid {}", cx.uid, cx.gid),
            ));
        }
        Ok(guard)
    }
}

impl Drop for Become {
    fn drop(&mut self) {
        let own = own();
        // SAFETY: as above. Back to the brick's own (root's capabilities
        // come back with fsuid 0).
        unsafe {
            libc::setfsuid(own.uid);
            libc::setfsgid(own.gid);
        }
        if let Err(e) = set_groups(&own.groups) {
            // Should never happen (root may always set its groups), and a
            // thread left with a caller's groups must not serve anyone.
            tracing::error!("cannot restore the brick's groups: {e}");
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32, groups: Vec<u32>) -> Ctx {
        Ctx {
            uid,
            gid: uid,
            groups,
            ..Ctx::default()
        }
    }

    fn fsuid() -> u32 {
        unsafe { libc::setfsuid(u32::MAX) as u32 }
    }

    #[test]
    fn the_identity_is_the_callers_inside_and_the_bricks_after() {
        if own().uid != 0 {
            return; // only root can act as others
        }
        let seen = as_caller(&user(4321, vec![7, 8]), || {
            let groups = rustix::process::getgroups().unwrap();
            Ok((fsuid(), groups.len()))
        })
        .unwrap();
        assert_eq!(seen, (4321, 2));
        assert_eq!(fsuid(), 0);
        assert_eq!(
            rustix::process::getgroups().unwrap().len(),
            own().groups.len()
        );
        // Root, and mortar's own requests, run as the brick.
        let internal = Ctx {
            internal: true,
            ..user(4321, vec![])
        };
        assert_eq!(as_caller(&internal, || Ok(fsuid())).unwrap(), 0);
        assert_eq!(as_caller(&user(0, vec![]), || Ok(fsuid())).unwrap(), 0);
    }

    #[test]
    fn another_thread_keeps_its_own_identity() {
        if own().uid != 0 {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            as_caller(&user(999, vec![5]), || {
                tx.send(()).unwrap();
                go_rx.recv().unwrap();
                Ok(())
            })
        });
        rx.recv().unwrap();
        // While the other thread acts as 999, this one is still root, with
        // the brick's groups.
        assert_eq!(fsuid(), 0);
        assert_eq!(
            rustix::process::getgroups().unwrap().len(),
            own().groups.len()
        );
        go_tx.send(()).unwrap();
        other.join().unwrap().unwrap();
    }
}
