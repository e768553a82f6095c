//! `round/mod.rs`'s round with the allocator the `baton` binary uses; `rounds` runs it with
//! the system's.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cluster;
mod round;

criterion::criterion_main!(round::benches);
