//! The policy module's allocator after the snapshot: every request's memory
//! from fresh pages, packed, and nothing of the snapshot written.
//!
//! *Why:* Kubewarden's policy-server runs each request on a **fresh
//! instance** whose linear memory is the pre-initialised image, mapped
//! copy-on-write. Every page a request *writes* costs a page fault and a
//! 4 KiB copy (≈ 2–3 µs), which made page faults most of a fresh `validate`
//! (issue #35: ~45 of them). A general-purpose allocator (dlmalloc, which
//! built the snapshot) serves a request from the free chunks scattered
//! through the snapshot's heap and relinks its bins there: about 30 of those
//! pages were its bookkeeping. This allocator, once [`freeze`]d at the end of
//! pre-initialisation:
//!
//! * serves every allocation from a region above the snapshot (zero pages
//!   the image does not hold), bump-allocated, so a request's data lies on as
//!   few pages as it needs;
//! * keeps its state at the start of that region (the image stays
//!   read-only: no static is written);
//! * reuses freed blocks through size classes four to a doubling (8-byte
//!   steps up to 64 B, then 80, 96, 112, 128, 160, …: a block is at most a
//!   quarter larger than asked for, so a request's pages hold data, not
//!   rounding; no headers: the layout says the size; blocks are never split
//!   or merged), so a long-lived instance (kwctl, hosts that keep instances)
//!   is bounded by the sum over size classes of each class's peak use (at
//!   most 1.25 times the bytes asked for, per class);
//! * never frees a block of the snapshot: it is left where it is (bounded by
//!   the snapshot's heap, ~1.5 MB, once per block).
//!
//! Before [`freeze`] (pre-initialisation, or a module that was never
//! pre-initialised) every call goes to the system allocator unchanged.
//!
//! The arena's logic is plain Rust over addresses ([`Arena`]), tested
//! natively; only [`PolicyAlloc`] (wasm32) touches linear memory and
//! `memory.grow`.

/// Size classes: eight of 8-byte steps (8 … 64 B), then four per doubling
/// (80, 96, 112, 128; 160, …) up to 2^32 B (the whole 32-bit space).
const CLASSES: usize = SMALL_CLASSES + 4 * (32 - 6);
/// Classes in 8-byte steps: 8 … 64 B.
const SMALL_CLASSES: usize = 8;
/// The smallest block (a free block holds the next free block's address).
const MIN_BLOCK: usize = 8;

/// The arena's state, at the start of its first region (fresh memory is
/// zero: all-zero is "not started yet").
#[repr(C)]
struct State {
    /// Written at every allocation, before anything of the state is read:
    /// a fresh instance's first touch of the page is then a write, one page
    /// fault (a read first maps the shared zero page, and the write after it
    /// faults again).
    touched: usize,
    /// Next free byte of the current region (0: not started).
    next: usize,
    /// End of the current region.
    end: usize,
    /// Heads of the free lists, one per size class (0: empty).
    free: [usize; CLASSES],
}

/// Where new regions come from: `memory.grow` in the module, a buffer in
/// the tests. Returns the new region `(start, end)`, at least `bytes` long.
pub trait Grow {
    fn grow(&mut self, bytes: usize) -> Option<(usize, usize)>;
}

/// The block size and class index for a request of `size` bytes aligned to
/// `align`; `None` past the largest class.
fn class(size: usize, align: usize) -> Option<(usize, usize)> {
    let want = size.max(align).max(MIN_BLOCK);
    if want <= SMALL_CLASSES * MIN_BLOCK {
        let block = want.next_multiple_of(MIN_BLOCK);
        return Some((block / MIN_BLOCK - 1, block));
    }
    // `want` lies in (2^p, 2^(p+1)], p ≥ 6: blocks in steps of 2^p / 4.
    let p = (usize::BITS - 1 - (want - 1).leading_zeros()) as usize;
    let step = 1usize << (p - 2);
    let block = want.checked_next_multiple_of(step)?;
    let index = SMALL_CLASSES + (p - 6) * 4 + (block >> (p - 2)) - 5;
    (index < CLASSES).then_some((index, block))
}

fn align_up(addr: usize, align: usize) -> Option<usize> {
    addr.checked_add(align - 1).map(|a| a & !(align - 1))
}

/// The arena whose state lies at `base` (the first byte after the
/// snapshot). Every method is `unsafe`: `base` must point at memory this
/// arena alone owns, zeroed before first use, and blocks given back must be
/// ones it handed out, with their layout (the `GlobalAlloc` contract).
pub struct Arena {
    base: usize,
}

impl Arena {
    /// # Safety
    /// `base` is aligned to 8 and addresses at least `size_of::<State>()`
    /// writable bytes owned by this arena (zero at first use) up to `end`.
    pub const unsafe fn at(base: usize) -> Self {
        Self { base }
    }

    /// The state, started on first use.
    ///
    /// # Safety
    /// See [`Arena::at`]; no other reference to the state is alive.
    unsafe fn started<'s>(base: usize, first_end: usize) -> &'s mut State {
        // SAFETY: the caller owns `base` for the arena (Arena::at).
        let state = unsafe { &mut *(base as *mut State) };
        // The write first (see `touched`): volatile, and no read of the state
        // moved above it (the fence).
        // SAFETY: the field is the state's, aligned.
        unsafe { std::ptr::write_volatile(&mut state.touched, 1) };
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        let next = state.next;
        if next == 0 {
            state.next = base + std::mem::size_of::<State>();
            state.end = first_end;
        }
        state
    }

    /// Whether `ptr` was handed out by this arena (not by the snapshot's allocator).
    pub fn owns(&self, ptr: usize) -> bool {
        ptr >= self.base
    }

    /// A block of at least `size` bytes aligned to `align` (a power of two),
    /// or 0. `first_end`: where the memory after `base` ends at first use.
    ///
    /// # Safety
    /// See [`Arena::at`].
    pub unsafe fn alloc(&self, size: usize, align: usize, first_end: usize, grow: &mut impl Grow) -> usize {
        let Some((index, block)) = class(size, align) else { return 0 };
        // SAFETY: as for the caller.
        let state = unsafe { Self::started(self.base, first_end) };
        let head = state.free[index];
        if head != 0 && head % align == 0 {
            // SAFETY: a free block of this class holds the next one's address.
            state.free[index] = unsafe { *(head as *const usize) };
            return head;
        }
        let Some(start) = align_up(state.next, align.max(MIN_BLOCK)) else { return 0 };
        let fits = start.checked_add(block).is_some_and(|e| e <= state.end);
        if fits {
            state.next = start + block;
            return start;
        }
        // A new region; it need not follow the last one (others may grow memory too).
        let Some((region, end)) = grow.grow(block + align) else { return 0 };
        let start = if region == state.end { start } else { align_up(region, align.max(MIN_BLOCK)).unwrap_or(end) };
        if start.checked_add(block).is_none_or(|e| e > end) {
            return 0;
        }
        state.end = end;
        state.next = start + block;
        start
    }

    /// Gives a block back.
    ///
    /// # Safety
    /// `ptr` came from [`Arena::alloc`] with this `size` and `align`.
    pub unsafe fn dealloc(&self, ptr: usize, size: usize, align: usize) {
        let Some((index, block)) = class(size, align) else { return };
        // SAFETY: the arena has started (it handed out `ptr`).
        let state = unsafe { &mut *(self.base as *mut State) };
        if ptr + block == state.next {
            state.next = ptr;
            return;
        }
        // SAFETY: the block is ours and at least MIN_BLOCK long.
        unsafe { *(ptr as *mut usize) = state.free[index] };
        state.free[index] = ptr;
    }

    /// Resizes in place when it can: the same class, or the last block of
    /// the region with room after it. `false`: the caller moves the data.
    ///
    /// # Safety
    /// As for [`Arena::dealloc`].
    pub unsafe fn resize_in_place(&self, ptr: usize, size: usize, align: usize, new_size: usize) -> bool {
        let (Some((old, old_block)), Some((new, new_block))) = (class(size, align), class(new_size, align)) else {
            return false;
        };
        if old == new {
            return true;
        }
        // SAFETY: the arena has started (it handed out `ptr`).
        let state = unsafe { &mut *(self.base as *mut State) };
        if ptr + old_block == state.next && ptr.checked_add(new_block).is_some_and(|e| e <= state.end) {
            state.next = ptr + new_block;
            return true;
        }
        false
    }
}

/// The module's global allocator (wasm32 only): the system allocator until
/// [`freeze`], the [`Arena`] after it.
#[cfg(target_arch = "wasm32")]
pub mod global {
    use std::{
        alloc::{GlobalAlloc, Layout, System},
        sync::atomic::{AtomicUsize, Ordering::Relaxed},
    };

    use super::{Arena, Grow};

    const PAGE: usize = 65536;
    /// Fresh pages made part of the module's initial memory at the last
    /// [`freeze`], and the least a request's arena grows by: most requests
    /// never grow memory (a grow is a system call in the host).
    pub const REQUEST_PAGES: usize = 16;
    /// What a [`freeze`] during pre-initialisation reserves, and the least
    /// its arena grows by: one page, so the copies made there follow each
    /// other (and the request's region follows them) in as few 2 MiB spans
    /// of memory as they fill; each span a fresh instance touches costs the
    /// host a page table of its own (~3 µs, BENCHMARKS.md).
    pub const COPY_PAGES: usize = 1;

    /// The arena's base (0: not frozen), the end of its first region and the
    /// least it grows by; written at [`freeze`], read-only in every instance.
    static BASE: AtomicUsize = AtomicUsize::new(0);
    static FIRST_END: AtomicUsize = AtomicUsize::new(0);
    static GROW_PAGES: AtomicUsize = AtomicUsize::new(REQUEST_PAGES);

    struct MemoryGrow;

    impl Grow for MemoryGrow {
        fn grow(&mut self, bytes: usize) -> Option<(usize, usize)> {
            let pages = bytes.div_ceil(PAGE).max(GROW_PAGES.load(Relaxed));
            let old = core::arch::wasm32::memory_grow(0, pages);
            if old == usize::MAX {
                return None;
            }
            // The last page of a full 4 GiB memory ends past usize: not usable.
            Some((old.checked_mul(PAGE)?, old.checked_add(pages)?.checked_mul(PAGE)?))
        }
    }

    /// Ends pre-initialisation: from now on every allocation comes from
    /// fresh memory above the snapshot. `wizer-initialize` calls it before
    /// copying each compiled schema into windows of its own
    /// (`admission::compact`), and last, so that the copies are part of the
    /// snapshot and a request's allocations (and the arena's state) start
    /// on pages of their own that are not in the image: a first write there
    /// is a zero page, not a copy. Blocks of an earlier region are never
    /// freed (they are below the new base). Should `memory.grow` fail, the
    /// arena stays where it was ([`below_arena`] tells).
    /// `pages`: the region reserved, and the least the arena grows by
    /// ([`COPY_PAGES`] while copying, [`REQUEST_PAGES`] last).
    pub fn freeze(pages: usize) {
        // At least one page: the arena's state lives at its start.
        let pages = pages.max(1);
        let old = core::arch::wasm32::memory_grow(0, pages);
        if old == usize::MAX {
            return; // no fresh memory: stay on the system allocator
        }
        let (Some(base), Some(end)) = (old.checked_mul(PAGE), old.checked_add(pages).and_then(|p| p.checked_mul(PAGE)))
        else {
            return; // no room below 4 GiB: stay on the system allocator
        };
        FIRST_END.store(end, Relaxed);
        GROW_PAGES.store(pages, Relaxed);
        BASE.store(base, Relaxed);
    }

    /// Whether `addr` lies below the arena (frozen): a block there is the
    /// snapshot's, never freed and never handed out again.
    pub fn below_arena(addr: usize) -> bool {
        let base = BASE.load(Relaxed);
        base != 0 && addr < base
    }

    pub struct PolicyAlloc;

    // SAFETY: before `freeze` every call is System's; after it, blocks of
    // the arena go to the arena and blocks of the snapshot are never freed
    // (Arena::owns tells them apart: the arena lies above all of them).
    unsafe impl GlobalAlloc for PolicyAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let base = BASE.load(Relaxed);
            if base == 0 {
                // SAFETY: forwarded as is.
                return unsafe { System.alloc(layout) };
            }
            // SAFETY: the arena owns everything from `base` (freeze).
            let arena = unsafe { Arena::at(base) };
            // SAFETY: as above.
            (unsafe { arena.alloc(layout.size(), layout.align(), FIRST_END.load(Relaxed), &mut MemoryGrow) }) as *mut u8
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let base = BASE.load(Relaxed);
            if base == 0 {
                // SAFETY: forwarded as is.
                return unsafe { System.dealloc(ptr, layout) };
            }
            // SAFETY: the arena owns everything from `base` (freeze).
            let arena = unsafe { Arena::at(base) };
            if arena.owns(ptr as usize) {
                // SAFETY: the block is the arena's, with its layout.
                unsafe { arena.dealloc(ptr as usize, layout.size(), layout.align()) }
            }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let base = BASE.load(Relaxed);
            if base == 0 {
                // SAFETY: forwarded as is.
                return unsafe { System.realloc(ptr, layout, new_size) };
            }
            // SAFETY: the arena owns everything from `base` (freeze).
            let arena = unsafe { Arena::at(base) };
            // SAFETY: the block is the arena's when it owns it, with its layout.
            if arena.owns(ptr as usize)
                && unsafe { arena.resize_in_place(ptr as usize, layout.size(), layout.align(), new_size) }
            {
                return ptr;
            }
            // SAFETY: new_size is non-zero and fits (GlobalAlloc::realloc's contract).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as for alloc.
            let new = unsafe { self.alloc(new_layout) };
            if !new.is_null() {
                // SAFETY: both blocks are valid for the smaller size and do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer standing in for linear memory: regions handed out in order,
    /// `gap` bytes apart (someone else grew memory in between) when set.
    struct Buffer {
        mem: Vec<u64>,
        used: usize,
        gap: usize,
        grows: usize,
    }

    impl Buffer {
        fn new(words: usize) -> Self {
            Self { mem: vec![0; words], used: 0, gap: 0, grows: 0 }
        }
        fn start(&self) -> usize {
            self.mem.as_ptr() as usize
        }
        fn take(&mut self, bytes: usize) -> Option<(usize, usize)> {
            let start = self.start() + self.used;
            (self.used + bytes <= self.mem.len() * 8).then(|| {
                self.used += bytes;
                (start, start + bytes)
            })
        }
    }

    impl Grow for Buffer {
        fn grow(&mut self, bytes: usize) -> Option<(usize, usize)> {
            self.grows += 1;
            let gap = self.gap;
            self.take(gap)?;
            self.take(bytes.div_ceil(4096) * 4096)
        }
    }

    fn arena(buf: &mut Buffer, first: usize) -> (Arena, usize) {
        let (base, end) = buf.take(first).expect("room");
        // SAFETY: the buffer's first bytes are the arena's, zeroed.
        (unsafe { Arena::at(base) }, end)
    }

    #[test]
    fn classes_are_eight_byte_steps_then_four_per_doubling_and_refuse_the_impossible() {
        assert_eq!(class(1, 1), Some((0, 8)));
        assert_eq!(class(8, 8), Some((0, 8)));
        assert_eq!(class(9, 1), Some((1, 16)));
        assert_eq!(class(24, 8), Some((2, 24)));
        assert_eq!(class(4, 64), Some((7, 64)));
        assert_eq!(class(65, 8), Some((8, 80)));
        assert_eq!(class(128, 8), Some((11, 128)));
        assert_eq!(class(129, 8), Some((12, 160)));
        assert_eq!(class(600, 4), Some((8 + 3 * 4, 640)));
        assert_eq!(class(36_122, 1), Some((8 + 9 * 4, 40_960)));
        assert_eq!(class(1 << 31, 1), Some((CLASSES - 5, 1 << 31)));
        assert_eq!(class(usize::MAX, 1), None);
        assert_eq!(class(1 << 40, 8), None);
        // Every size maps to the smallest class that holds it, at most a
        // quarter (or 7 bytes) larger, and the classes are strictly increasing.
        let mut last = (0, 0);
        for size in 1..70_000usize {
            let (index, block) = class(size, 1).expect("a class");
            assert!(block >= size && (block - size) * 4 <= size.max(32), "{size} -> {block}");
            assert!(index < CLASSES && block % MIN_BLOCK == 0);
            if block != last.1 {
                assert_eq!(index, last.0 + usize::from(last.1 != 0), "{size}: classes in order, none skipped");
                last = (index, block);
            }
        }
    }

    #[test]
    fn blocks_are_aligned_disjoint_packed_and_reused_by_class() {
        let mut buf = Buffer::new(1 << 16);
        let (a, end) = arena(&mut buf, 4096);
        // SAFETY: the arena owns the buffer's region; blocks are given back with their layout.
        unsafe {
            let x = a.alloc(24, 8, end, &mut buf);
            let y = a.alloc(3, 1, end, &mut buf);
            let z = a.alloc(100, 16, end, &mut buf);
            assert!(x != 0 && y != 0 && z != 0);
            assert_eq!(x % 8, 0);
            assert_eq!(z % 16, 0);
            assert!(y >= x + 24 && z >= y + 8, "disjoint: {x:#x} {y:#x} {z:#x}");
            assert!(z + 128 - x < 4096, "packed on one page");
            // A freed block of a class is the next one handed out for it.
            a.dealloc(x, 24, 8);
            assert_eq!(a.alloc(17, 8, end, &mut buf), x);
            // The last block freed moves the bump back.
            a.dealloc(z, 100, 16);
            assert_eq!(a.alloc(120, 8, end, &mut buf), z);
            assert_eq!(buf.grows, 0);
        }
    }

    #[test]
    fn a_free_block_not_aligned_enough_is_not_handed_out() {
        let mut buf = Buffer::new(1 << 16);
        let (a, end) = arena(&mut buf, 8192);
        // SAFETY: as above.
        unsafe {
            // 8-byte blocks until the next one ends off a multiple of 64 (the
            // buffer's address and the state's size decide where they start).
            let mut pad = a.alloc(8, 8, end, &mut buf);
            if (pad + 8) % 64 == 0 {
                pad = a.alloc(8, 8, end, &mut buf);
            }
            let x = a.alloc(64, 8, end, &mut buf);
            let _keep = a.alloc(8, 8, end, &mut buf);
            assert_ne!(x % 64, 0, "the case needs a free block that is not 64-aligned");
            a.dealloc(x, 64, 8);
            let y = a.alloc(64, 64, end, &mut buf);
            assert_eq!(y % 64, 0);
            assert_ne!(x, y, "the misaligned free block is not handed out");
            assert_eq!(a.alloc(64, 8, end, &mut buf), x, "it still serves a request it fits");
            assert_ne!(pad, y);
        }
    }

    #[test]
    fn resizing_stays_in_place_within_a_class_and_at_the_top() {
        let mut buf = Buffer::new(1 << 16);
        let (a, end) = arena(&mut buf, 8192);
        // SAFETY: as above.
        unsafe {
            let x = a.alloc(20, 4, end, &mut buf);
            assert!(a.resize_in_place(x, 20, 4, 24), "same class");
            assert!(a.resize_in_place(x, 24, 4, 200), "last block: grows into the free room");
            let y = a.alloc(8, 8, end, &mut buf);
            assert!(y >= x + 224);
            assert!(!a.resize_in_place(x, 200, 4, 600), "not the last block any more");
            assert!(!a.resize_in_place(y, 8, 8, 1 << 20), "no room in the region");
        }
    }

    #[test]
    fn a_region_that_runs_out_grows_and_a_foreign_gap_is_skipped() {
        let mut buf = Buffer::new(1 << 18);
        let (a, end) = arena(&mut buf, 4096);
        buf.gap = 4096;
        // SAFETY: as above.
        unsafe {
            let blocks: Vec<usize> = (0..40).map(|_| a.alloc(1000, 8, end, &mut buf)).collect();
            assert!(blocks.iter().all(|&b| b != 0));
            assert!(buf.grows >= 1);
            let mut sorted = blocks.clone();
            sorted.sort_unstable();
            assert!(sorted.windows(2).all(|w| w[0] + 1024 <= w[1]), "disjoint");
            // Nothing handed out lies in a gap someone else owns: every block is in a grown region.
            for b in &blocks {
                assert!(*b >= buf.start() && *b + 1024 <= buf.start() + buf.used);
            }
            // Out of memory: 0, not a crash.
            assert_eq!(a.alloc(1 << 30, 8, end, &mut buf), 0);
        }
    }

    #[test]
    fn a_long_lived_instance_stays_bounded_by_its_peak() {
        let mut buf = Buffer::new(1 << 18);
        let (a, end) = arena(&mut buf, 1 << 16);
        // SAFETY: as above.
        unsafe {
            let mut high = 0;
            for round in 0..1000usize {
                let sizes = [8 + round % 7, 100, 3000 + round % 500, 40];
                let blocks: Vec<usize> = sizes.iter().map(|&s| a.alloc(s, 8, end, &mut buf)).collect();
                for (b, s) in blocks.iter().zip(sizes).rev() {
                    a.dealloc(*b, s, 8);
                }
                high = high.max(buf.used);
            }
            assert_eq!(high, 1 << 16, "never grew past its first region");
            assert_eq!(buf.grows, 0);
        }
    }
}
