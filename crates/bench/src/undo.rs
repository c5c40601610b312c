//! What the benchmark set up and must take down however it ends (mounts,
//! daemons, volumes, scratch directories): each step is done once, in the
//! reverse order of setting up, by whoever comes first: the target's
//! close, its drop (an error on the way), or an interrupt (SIGINT,
//! SIGTERM: `on_signals`), after which the process exits.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

type Step = Box<dyn FnOnce() + Send>;

static STEPS: Mutex<Vec<(u64, Step)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
/// The interrupt being handled (0: none), and held while it is.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static HANDLING: Mutex<()> = Mutex::new(());

/// Records a step to take down something just set up; its id for `run`.
pub fn push(step: impl FnOnce() + Send + 'static) -> u64 {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    STEPS.lock().unwrap().push((id, Box::new(step)));
    id
}

/// Runs the steps `ids` not yet run, the last recorded first.
pub fn run(ids: &[u64]) {
    let steps: Vec<Step> = {
        let mut all = STEPS.lock().unwrap();
        let mut taken = Vec::new();
        while let Some(i) = all.iter().rposition(|(id, _)| ids.contains(id)) {
            taken.push(all.remove(i).1);
        }
        taken
    };
    // Outside the lock: a step may take seconds (an unmount retried).
    for step in steps {
        step();
    }
}

/// Runs every step not yet run, the last recorded first.
pub fn run_all() {
    let ids: Vec<u64> = STEPS.lock().unwrap().iter().map(|(id, _)| *id).collect();
    run(&ids);
}

/// On SIGINT or SIGTERM: says so, takes everything down, and exits with
/// 128 + the signal's number, as a shell reports a killed command.
pub fn on_signals() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut int, mut term) = rt.block_on(async {
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    std::thread::spawn(move || {
        let signo = rt.block_on(async {
            tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            }
        });
        let _handling = HANDLING.lock().unwrap();
        SIGNAL.store(signo, Ordering::SeqCst);
        eprintln!("\ninterrupted: unmounting and stopping what the benchmark set up");
        run_all();
        std::process::exit(128 + signo);
    });
    Ok(())
}

/// Called before a failure is reported: while an interrupt is handled,
/// waits for the process to exit there (the failure is the mounts going
/// away under the workload, nothing to report).
pub fn settle() {
    if SIGNAL.load(Ordering::SeqCst) != 0 {
        let _wait = HANDLING.lock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as M};

    #[test]
    fn steps_run_once_last_first() {
        let done = Arc::new(M::new(Vec::new()));
        let step = |n: u32| {
            let d = done.clone();
            move || d.lock().unwrap().push(n)
        };
        let (a, b, c) = (push(step(1)), push(step(2)), push(step(3)));
        run(&[a, c]);
        run(&[a, c]);
        assert_eq!(*done.lock().unwrap(), vec![3, 1]);
        run(&[b]);
        assert_eq!(*done.lock().unwrap(), vec![3, 1, 2]);
    }
}
