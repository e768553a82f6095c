//! `round/mod.rs`'s round with the system's allocator; `rounds-mimalloc` runs it with the
//! allocator the `baton` binary uses (`crates/cli/src/main.rs`).

mod cluster;
mod round;

criterion::criterion_main!(round::benches);
