//! Committed state digests: how replicas find out that their states parted.
//!
//! Replicas apply one log, so at equal indexes their states must be equal, byte for byte.
//! A bug in one build's `apply` (or a bit flipped in memory) would make one replica's state
//! differ silently, and it would go on answering reads and, once it leads, planning from a
//! state nobody else holds. So now and then the leader writes [`Op::StateDigest`]: every
//! replica hashes its state right after applying that entry (a mark), and the next one
//! carries the leader's hash of the previous mark ([`DigestAt`]). A replica whose own hash of
//! that mark differs stops applying, naming the index (the raft crate's `digest`).
//!
//! The hash is of the state's encoding, which a build of another data format may write
//! differently; so a check names the format of the build that hashed it, and a replica of
//! another format does not compare (during a rolling upgrade).
//!
//! [`Op::StateDigest`]: crate::Op::StateDigest

use serde::{Deserialize, Serialize};

/// The leader's hash of its state right after the entry at `index` (a mark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestAt {
    /// The log index of the mark.
    pub index: u64,
    /// The data format of the build that hashed it (its `DATA_FORMAT`).
    pub format: u32,
    /// SHA-256 of the state's encoding.
    pub sha256: [u8; 32],
}

impl DigestAt {
    /// The hash in hex, as logs and errors show it (the first 16 digits: enough to tell
    /// two apart by eye).
    pub fn short(&self) -> String {
        short_hex(&self.sha256)
    }
}

/// The first 8 bytes of `sha256` in hex.
pub fn short_hex(sha256: &[u8; 32]) -> String {
    sha256[..8].iter().map(|b| format!("{b:02x}")).collect()
}
