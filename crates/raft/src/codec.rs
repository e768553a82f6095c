//! bincode for everything raft writes or sends, and checksummed records for what it stores.
//!
//! A stored record is `crc32 (4 bytes, little endian) ++ bincode payload`. The checksum is
//! checked on every read, so bit rot or a torn write is reported with the record's name
//! instead of being decoded into a wrong value.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why bytes could not be turned into a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode: {0}")]
    Encode(String),
    #[error("cannot decode: {0}")]
    Decode(String),
    #[error("record is {len} bytes, shorter than its 4-byte checksum")]
    Short { len: usize },
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("{extra} unexpected bytes after the value")]
    Trailing { extra: usize },
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Writes `value` encoded into `out` as it goes (no buffer of the whole encoding); the
/// number of bytes written.
pub fn encode_into<T: Serialize>(value: &T, out: &mut impl std::io::Write) -> Result<usize, CodecError> {
    bincode::serde::encode_into_std_write(value, out, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// The size of `value` encoded, without keeping the bytes.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<usize, CodecError> {
    encode_into(value, &mut std::io::sink())
}

/// How many bytes a valid encoding may claim per byte it holds. bincode counts what a decode
/// claims against its limit: a string's or a byte array's length, and the in-memory size of
/// each integer (8 for a u64 whose varint takes 1 byte, 4 for an enum tag). Nothing baton
/// encodes claims more than 8 per byte; 16 leaves room.
const CLAIM_PER_BYTE: usize = 16;

/// Limits tried in order: the first at least `CLAIM_PER_BYTE` times the input is used. The
/// last covers a snapshot of 4 GiB (`max_snapshot_bytes`' default).
const LIMIT_1M: usize = 1 << 20;
const LIMIT_16M: usize = 16 << 20;
const LIMIT_256M: usize = 256 << 20;
const LIMIT_4G: usize = 4 << 30;
const LIMIT_64G: usize = 64 << 30;

fn decode_within<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    bincode::serde::decode_from_slice(bytes, config().with_limit::<LIMIT>())
        .map_err(|e| CodecError::Decode(e.to_string()))
}

/// Decodes a whole buffer; bytes left over mean the buffer is not what the caller thinks.
///
/// Without a limit, bincode allocates whatever a length prefix claims before it finds the
/// input too short: ten bytes from the network could ask for 2^57 bytes and abort the
/// process. The limit here is a small multiple of the input's own size, so a decode never
/// allocates much more than the bytes it was given.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let claim = bytes.len().saturating_mul(CLAIM_PER_BYTE);
    let (value, read) = match claim {
        c if c <= LIMIT_1M => decode_within::<T, LIMIT_1M>(bytes)?,
        c if c <= LIMIT_16M => decode_within::<T, LIMIT_16M>(bytes)?,
        c if c <= LIMIT_256M => decode_within::<T, LIMIT_256M>(bytes)?,
        c if c <= LIMIT_4G => decode_within::<T, LIMIT_4G>(bytes)?,
        _ => decode_within::<T, LIMIT_64G>(bytes)?,
    };
    if read != bytes.len() {
        return Err(CodecError::Trailing { extra: bytes.len() - read });
    }
    Ok(value)
}

/// Decodes a snapshot's state: the current layout (with the retired replicas), or the one
/// before them (with the topology, written while no replica was removed), or the one before
/// it (with the ranks' saves, written while no topology level is declared), or the one before
/// them (with the behaviour, written while no save is tallied), or the one with arrays
/// (with unhealthy GPUs, written while there is no array), or the one before unhealthy GPUs
/// (with maintenance windows, written while no GPU is unhealthy), or the one
/// before windows (with waiting jobs, written while there is no window), or the one before
/// waiting jobs (with the queues' visibility, written while no job waits), or format 5's
/// (without visibility: written before it existed, and still while no queue has one set),
/// or one written before the completing
/// ranks, queue admins and queue revisions existed (data format 2: nothing is completing, no
/// queue admins, every queue at revision 0), or before tenancy existed (without the tenancy
/// part, which then starts with its defaults), or before tokens (the data alone; the
/// identity part starts empty too). An older layout is tried only when the newer ones fail,
/// and must use every byte, so a current snapshot is never read as an old one.
pub fn decode_state(bytes: &[u8]) -> Result<baton_model::State, CodecError> {
    use baton_model::state::{
        PreAccessState, PreArraysState, PreBehaviourState, PreCompletingState, PreGpuFaultsState, PreRankSavesState,
        PreRetiredState, PreTenancyState, PreTopologyState, PreVisibilityState, PreWaitsState, PreWindowsState,
    };
    decode::<baton_model::State>(bytes).or_else(|current| {
        decode::<PreRetiredState>(bytes)
            .map(|old| old.0)
            .or_else(|_| decode::<PreTopologyState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreRankSavesState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreBehaviourState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreArraysState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreGpuFaultsState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreWindowsState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreWaitsState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreVisibilityState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreCompletingState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreTenancyState>(bytes).map(|old| old.0))
            .or_else(|_| decode::<PreAccessState>(bytes).map(|old| old.0))
            .map_err(|_| current)
    })
}

/// Encodes `value` as a checksummed record.
pub fn seal<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let payload = encode(value)?;
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Checks a record's checksum and decodes it.
pub fn unseal<T: DeserializeOwned>(record: &[u8]) -> Result<T, CodecError> {
    if record.len() < 4 {
        return Err(CodecError::Short { len: record.len() });
    }
    let (head, payload) = record.split_at(4);
    let stored = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let computed = crc32fast::hash(payload);
    if stored != computed {
        return Err(CodecError::Checksum { stored, computed });
    }
    decode(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_record_round_trips() {
        let rec = seal(&(7u64, "seven".to_string())).unwrap();
        let back: (u64, String) = unseal(&rec).unwrap();
        assert_eq!(back, (7, "seven".to_string()));
    }

    #[test]
    fn flipped_bit_is_a_checksum_error() {
        let mut rec = seal(&"payload".to_string()).unwrap();
        let last = rec.len() - 1;
        rec[last] ^= 0x01;
        assert!(matches!(unseal::<String>(&rec), Err(CodecError::Checksum { .. })));
    }

    #[test]
    fn short_record_is_refused() {
        assert_eq!(unseal::<String>(&[1, 2]), Err(CodecError::Short { len: 2 }));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode(&5u32).unwrap();
        bytes.push(0);
        assert_eq!(decode::<u32>(&bytes), Err(CodecError::Trailing { extra: 1 }));
    }
}
