//! The worker threads that serve connections.
//!
//! Each worker is a thread with its own single-threaded tokio runtime, and a
//! connection stays on the worker it was given for its whole life, as in
//! memcached, whose worker threads each run their own event loop. A worker
//! runs its ready connections in the order its poll found them ready, and
//! nothing moves between workers.
//!
//! The alternative, one work-stealing runtime for all workers, serves
//! connections less evenly under many clients: a poll of the sockets puts
//! every ready connection on the polling worker's own queue, which holds
//! 256; the rest go to a shared queue that a worker looks at only every few
//! dozen tasks, so those connections wait longest, and the slowest
//! percentile of replies waits for them.
//!
//! A new connection goes to the worker serving the fewest, the next in turn
//! among equals.

use larder_engine::IdleSignal;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

/// Builds one worker's runtime. Before the worker parks for want of work it
/// reports to `idle` (see [`IdleSignal`]).
pub(crate) fn runtime(idle: &Arc<IdleSignal>) -> io::Result<Runtime> {
    let idle = Arc::clone(idle);
    tokio::runtime::Builder::new_current_thread()
        .on_thread_park(move || idle.report())
        .enable_all()
        .build()
}

/// Where connections are served: one runtime per worker.
pub(crate) struct Workers {
    workers: Vec<Worker>,
    /// Where the search for the least busy worker starts next.
    next: AtomicUsize,
}

struct Worker {
    handle: Handle,
    connections: Arc<AtomicUsize>,
}

/// A connection's place on its worker; gives it up when dropped, however
/// the connection ends.
pub(crate) struct Assignment {
    connections: Arc<AtomicUsize>,
}

impl Drop for Assignment {
    fn drop(&mut self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Workers on the runtimes of `handles`; at least one.
    pub(crate) fn new(handles: Vec<Handle>) -> Workers {
        assert!(!handles.is_empty(), "a server needs a worker");
        let workers = handles
            .into_iter()
            .map(|handle| Worker {
                handle,
                connections: Arc::default(),
            })
            .collect();
        Workers {
            workers,
            next: AtomicUsize::new(0),
        }
    }

    /// Chooses the worker for a new connection: the one serving the fewest.
    pub(crate) fn assign(&self) -> (&Handle, Assignment) {
        let count = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        let chosen = (0..count)
            .map(|offset| &self.workers[(start + offset) % count])
            .min_by_key(|worker| worker.connections.load(Ordering::Relaxed))
            .expect("at least one worker");
        chosen.connections.fetch_add(1, Ordering::Relaxed);
        let assignment = Assignment {
            connections: Arc::clone(&chosen.connections),
        };
        (&chosen.handle, assignment)
    }
}

/// The worker threads besides the one that runs the server's own tasks.
/// Each runs its runtime until the `Threads` are dropped, which stops them
/// and waits for them; whatever their runtimes still hold is dropped then.
pub(crate) struct Threads {
    running: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Threads {
    /// Starts `count` worker threads, returning them and their runtimes'
    /// handles.
    pub(crate) fn start(
        count: usize,
        idle: &Arc<IdleSignal>,
    ) -> io::Result<(Threads, Vec<Handle>)> {
        let mut threads = Threads {
            running: Vec::with_capacity(count),
        };
        let mut handles = Vec::with_capacity(count);
        for index in 1..=count {
            let runtime = runtime(idle)?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("larder-worker-{index}"))
                .spawn(move || {
                    let _ = runtime.block_on(stopped);
                })?;
            threads.running.push((stop, thread));
        }
        Ok((threads, handles))
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        for (stop, thread) in self.running.drain(..) {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_goes_to_the_worker_serving_the_fewest() {
        let runtimes: Vec<Runtime> = (0..3)
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
            })
            .collect();
        let workers = Workers::new(runtimes.iter().map(|r| r.handle().clone()).collect());
        let mut held: Vec<Assignment> = (0..6).map(|_| workers.assign().1).collect();
        let loads = |workers: &Workers| -> Vec<usize> {
            workers
                .workers
                .iter()
                .map(|w| w.connections.load(Ordering::Relaxed))
                .collect()
        };
        assert_eq!(loads(&workers), [2, 2, 2]);
        // Two connections of the first worker end: the next two go there.
        let first = Arc::clone(&workers.workers[0].connections);
        let ending: Vec<usize> = held
            .iter()
            .enumerate()
            .filter(|(_, a)| Arc::ptr_eq(&a.connections, &first))
            .map(|(i, _)| i)
            .collect();
        for i in ending.into_iter().rev() {
            held.swap_remove(i);
        }
        assert_eq!(loads(&workers), [0, 2, 2]);
        held.push(workers.assign().1);
        held.push(workers.assign().1);
        assert_eq!(loads(&workers), [2, 2, 2]);
        drop(held);
        assert_eq!(loads(&workers), [0, 0, 0]);
    }

    #[test]
    fn among_equally_busy_workers_the_next_in_turn_gets_the_connection() {
        let runtimes: Vec<Runtime> = (0..3)
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
            })
            .collect();
        let workers = Workers::new(runtimes.iter().map(|r| r.handle().clone()).collect());
        let chosen = |assignment: &Assignment| {
            workers
                .workers
                .iter()
                .position(|w| Arc::ptr_eq(&w.connections, &assignment.connections))
                .unwrap()
        };
        // Each connection ends before the next arrives, so all are idle
        // every time: the choice still goes round.
        let turns: Vec<usize> = (0..6).map(|_| chosen(&workers.assign().1)).collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2]);
    }
}
