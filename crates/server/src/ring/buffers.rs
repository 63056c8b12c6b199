//! The buffers a ring thread's connections receive into: a ring of
//! buffers provided to the kernel (`IORING_REGISTER_PBUF_RING`), shared by
//! every connection of the thread. A connection's receive stays armed from
//! one request to the next (a multishot receive) and takes a buffer for
//! each arrival; the ring thread copies what came into the connection's
//! own input and gives the buffer back at once, so the buffers in use at
//! any time are those of one round's completions.

use io_uring::IoUring;
use std::alloc::Layout;
use std::ptr::{addr_of, addr_of_mut, NonNull};
use std::sync::atomic::{AtomicU16, Ordering};

/// An entry of the ring, as the kernel lays it out (`struct
/// io_uring_buf`); the first entry's `resv` is the ring's tail. Written
/// only field by field through raw pointers: the kernel reads the ring
/// meanwhile.
#[repr(C)]
struct Entry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

/// The id of the ring thread's one group of buffers.
pub(super) const GROUP: u16 = 0;

pub(super) struct ReceiveBuffers {
    /// The ring of entries the kernel takes buffers from, page-aligned as
    /// the kernel requires; `count` of them.
    entries: NonNull<Entry>,
    entries_layout: Layout,
    /// The buffers, `size` bytes each, one after another. Raw: the kernel
    /// writes into those it holds.
    memory: NonNull<u8>,
    memory_layout: Layout,
    count: u16,
    size: usize,
    /// Entries handed to the kernel so far (wrapping), published in the
    /// ring's tail.
    tail: u16,
}

impl ReceiveBuffers {
    /// Registers `count` buffers of `size` bytes with `ring`; `count` is a
    /// power of two. Fails where the kernel has no provided-buffer rings
    /// (before Linux 5.19).
    pub(super) fn register(ring: &IoUring, count: u16, size: usize) -> std::io::Result<Self> {
        assert!(count.is_power_of_two() && size > 0);
        // SAFETY: sysconf takes no pointers.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let entries_layout =
            Layout::from_size_align(usize::from(count) * std::mem::size_of::<Entry>(), page)
                .expect("a valid layout");
        let memory_layout =
            Layout::from_size_align(usize::from(count) * size, page).expect("a valid layout");
        let mut buffers = ReceiveBuffers {
            entries: allocate(entries_layout).cast(),
            entries_layout,
            memory: allocate(memory_layout),
            memory_layout,
            count,
            size,
            tail: 0,
        };
        // SAFETY: the entries stay allocated, and the buffers too, until
        // `self` is dropped, which the ring thread does only after its ring
        // (see [`super::Worker`]'s fields).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                buffers.entries.as_ptr() as u64,
                count,
                GROUP,
                0,
            )?;
        }
        for id in 0..count {
            buffers.give_back(id);
        }
        Ok(buffers)
    }

    /// The first `length` bytes the kernel received into buffer `id`.
    /// Buffer `id` must have come back from the kernel with a completion
    /// and not yet been given back.
    pub(super) fn received(&self, id: u16, length: usize) -> &[u8] {
        assert!(id < self.count);
        // SAFETY: buffer `id` lies within the allocation, and the kernel
        // writes into it no more until it is given back.
        unsafe {
            std::slice::from_raw_parts(
                self.memory.as_ptr().add(usize::from(id) * self.size),
                length.min(self.size),
            )
        }
    }

    /// Hands buffer `id` back to the kernel.
    pub(super) fn give_back(&mut self, id: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        assert!(id < self.count);
        // SAFETY: buffer `id` lies within the allocation.
        let address = unsafe { self.memory.as_ptr().add(usize::from(id) * self.size) } as u64;
        let length = u32::try_from(self.size).unwrap_or(u32::MAX);
        // SAFETY: `index` is below `count`, within the entries'
        // allocation; the entry is past the tail, so the kernel does not
        // read it until the tail moves, and its fields are written
        // without making a reference to it (entry 0 holds the tail).
        unsafe {
            let entry = self.entries.as_ptr().add(index);
            addr_of_mut!((*entry).addr).write(address);
            addr_of_mut!((*entry).len).write(length);
            addr_of_mut!((*entry).bid).write(id);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the first entry's `resv`, a u16 aligned as
        // one; the kernel reads it, this thread alone writes it, always
        // atomically.
        let tail = unsafe { &*addr_of!((*self.entries.as_ptr()).resv).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for ReceiveBuffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `register` with these layouts.
        unsafe {
            std::alloc::dealloc(self.entries.as_ptr().cast(), self.entries_layout);
            std::alloc::dealloc(self.memory.as_ptr(), self.memory_layout);
        }
    }
}

/// Zeroed memory of `layout`, whose size is not zero.
fn allocate(layout: Layout) -> NonNull<u8> {
    // SAFETY: the callers' layouts have a size above zero.
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}
