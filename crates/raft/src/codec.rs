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

/// The size of `value` encoded, without keeping the bytes.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<usize, CodecError> {
    bincode::serde::encode_into_std_write(value, &mut std::io::sink(), config())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a whole buffer; bytes left over mean the buffer is not what the caller thinks.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != bytes.len() {
        return Err(CodecError::Trailing { extra: bytes.len() - read });
    }
    Ok(value)
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
