//! The client side of AgentLogs, for `baton logs JOB [-f]`.

use baton_proto::v1::LogsRequest;
use baton_proto::v1::agent_logs_client::AgentLogsClient;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::endpoint::endpoint;
use crate::error::LogsError;
use crate::limits::MAX_MESSAGE_BYTES;

/// Streams the log `req` names from the agent at `agent_addr` into `out`; with
/// `req.follow`, until the attempt has ended and its log is drained.
pub async fn fetch_logs(
    agent_addr: &str,
    req: LogsRequest,
    out: &mut (impl AsyncWrite + Unpin),
) -> Result<(), LogsError> {
    let addr = agent_addr.to_string();
    let ep = endpoint(agent_addr).map_err(|detail| LogsError::Address { addr: addr.clone(), detail })?;
    let channel = ep.connect().await.map_err(|e| LogsError::Connect { addr: addr.clone(), detail: e.to_string() })?;
    let mut client = AgentLogsClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let mut stream =
        client.logs(req).await.map_err(|status| LogsError::Refused { addr: addr.clone(), status })?.into_inner();
    while let Some(chunk) =
        stream.message().await.map_err(|status| LogsError::Refused { addr: addr.clone(), status })?
    {
        out.write_all(&chunk.data).await?;
    }
    out.flush().await?;
    Ok(())
}
