//! `baton snapshot save FILE`: a backup of a live cluster's whole state (admins).
//! `baton snapshot restore FILE --data-dir DIR ...`: seeds a new replica of a NEW cluster
//! from it, offline (docs/ops.md).

use std::io::Write;
use std::path::{Path, PathBuf};

use baton_proto::v1;
use baton_raft::backup::{BACKUP_FORMAT, Backup, restore};
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::{Conn, ConnArgs};

/// Largest backup the CLI accepts from a cluster (a replica's snapshot bound).
const MAX_BACKUP_BYTES: usize = 4 << 30;

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: SnapshotCmd,
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Save the cluster's whole state, as of every write acknowledged before the call, to
    /// FILE (with its index, format version and checksum). Admins only.
    Save { file: PathBuf },
    /// Seed a new replica's empty data directory from FILE, as replica ID of a NEW cluster
    /// (offline: start `baton server` on it afterwards, then add replicas).
    Restore {
        file: PathBuf,
        /// The new replica's data directory (must be empty or missing).
        #[arg(long)]
        data_dir: PathBuf,
        /// The new replica's id.
        #[arg(long, value_parser = crate::replica_id::parse_replica_id)]
        id: u64,
        /// The new cluster's id: must differ from the saved cluster's, so the two never talk.
        #[arg(long)]
        cluster_id: String,
        /// The address the new replica will be reached at (its `baton server --advertise`,
        /// or --listen); with a peer port of its own (--peer-listen),
        /// API_HOST:PORT/PEER_HOST:PORT (its --advertise and --peer-advertise).
        #[arg(long, value_parser = parse_member)]
        advertise: String,
    },
}

pub async fn run(conn: &Conn, a: &SnapshotArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        SnapshotCmd::Save { file } => save(conn, file, out).await,
        restore @ SnapshotCmd::Restore { .. } => restore_offline(restore, out),
    }
}

/// `snapshot restore`, which reaches no cluster.
fn parse_member(text: &str) -> Result<String, String> {
    baton_raft::Addrs::check_member(text).map(|_| text.to_string())
}

pub fn restore_offline(cmd: &SnapshotCmd, out: &mut dyn Write) -> Result<(), ClientError> {
    match cmd {
        SnapshotCmd::Save { .. } => Err(ClientError::Usage("snapshot save needs a cluster".into())),
        SnapshotCmd::Restore { file, data_dir, id, cluster_id, advertise } => {
            let backup = read(file)?;
            let index = restore(&backup, data_dir, cluster_id, *id, advertise)
                .map_err(|e| ClientError::Backup(e.to_string()))?;
            writeln!(
                out,
                "restored cluster {:?} at index {index} into {} as replica {id} of cluster {cluster_id:?}; start it with \
                 `baton server --id {id} --cluster-id {cluster_id} --data-dir {}` (no --bootstrap)",
                backup.cluster_id,
                data_dir.display(),
                data_dir.display()
            )?;
            Ok(())
        }
    }
}

fn read(file: &Path) -> Result<Backup, ClientError> {
    let bytes =
        std::fs::read(file).map_err(|e| ClientError::Backup(format!("{}: cannot read: {e}", file.display())))?;
    Backup::from_bytes(&bytes, file).map_err(|e| ClientError::Backup(e.to_string()))
}

async fn save(conn: &Conn, file: &Path, out: &mut dyn Write) -> Result<(), ClientError> {
    let mut stream = conn.call(Subject::Other, "", |mut c| async move { c.save_snapshot(v1::Empty {}).await }).await?;
    let mut bytes = Vec::new();
    let receive = async {
        while let Some(chunk) = stream.message().await.map_err(|s| ClientError::Stream(s.message().to_string()))? {
            bytes.extend_from_slice(&chunk.data);
            if bytes.len() > MAX_BACKUP_BYTES {
                return Err(ClientError::Backup(format!("the backup exceeds {MAX_BACKUP_BYTES} bytes")));
            }
        }
        Ok(())
    };
    tokio::time::timeout(conn.timeout(), receive).await.map_err(|_| ClientError::Timeout {
        secs: conn.timeout().as_secs_f64(),
        tried: "the backup stream".into(),
    })??;
    // What is written is what a restore will check.
    let backup = Backup::from_bytes(&bytes, file).map_err(|e| ClientError::Backup(e.to_string()))?;
    write_durably(file, &bytes)?;
    writeln!(
        out,
        "saved cluster {:?} at index {} to {} ({} bytes, format {BACKUP_FORMAT}, data format {}, checksum verified)",
        backup.cluster_id,
        backup.index,
        file.display(),
        bytes.len(),
        backup.format
    )?;
    Ok(())
}

/// Writes `bytes` to a temporary file beside `file`, syncs it, then renames it into place:
/// an interrupted save never leaves a partial FILE.
fn write_durably(file: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    let fail = |e: std::io::Error| ClientError::Backup(format!("{}: cannot write: {e}", file.display()));
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, file).map_err(fail)
}
