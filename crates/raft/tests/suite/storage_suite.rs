//! openraft's own storage test suite, against the sled-backed and the in-memory stores.
//!
//! The suite builds its own runtime, so these are plain `#[test]`s.

// openraft's StorageError is large and fixed by its traits.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use baton_raft::store::{KvStore, LogStore, MemKv, SledKv, StateMachineStore};
use baton_raft::types::{StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageIOError};

fn open(kv: Arc<dyn KvStore>) -> Result<(LogStore, StateMachineStore), StorageError> {
    let io = |e: baton_raft::store::StoreError| -> StorageError { StorageIOError::read(AnyError::error(e)).into() };
    let log = LogStore::open(kv.clone(), 1_024).map_err(io)?;
    let sm = StateMachineStore::open(kv).map_err(io)?;
    Ok((log, sm))
}

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let kv = SledKv::open(&dir.path().join("raft.sled")).map_err(|e| StorageIOError::read(AnyError::error(e)))?;
        let (log, sm) = open(Arc::new(kv))?;
        Ok((dir, log, sm))
    }
}

struct MemBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore> for MemBuilder {
    async fn build(&self) -> Result<((), LogStore, StateMachineStore), StorageError> {
        let (log, sm) = open(Arc::new(MemKv::new()))?;
        Ok(((), log, sm))
    }
}

#[test]
fn sled_store_passes_openraft_suite() -> Result<(), StorageError> {
    Suite::test_all(SledBuilder)
}

#[test]
fn memory_store_passes_openraft_suite() -> Result<(), StorageError> {
    Suite::test_all(MemBuilder)
}
