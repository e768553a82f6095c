//! `baton watch [JOB] [--replay]`: events as they commit, one line each
//! (`2026-11-22T10:00:01.234Z  Started  train-1  attempt 1 started`); with `-o json` one
//! JSON object per line, with `-o yaml` one document per event.

use std::io::Write;

use baton_proto::v1;
use clap::Args;

use crate::client::data::ToData;
use crate::client::error::{ClientError, Subject};
use crate::client::human::{event_kind, timestamp};
use crate::client::output::{Format, yaml_text};
use crate::client::{Conn, ConnArgs};

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only this job's events [default: every job's and node's].
    pub job: Option<String>,
    /// First print the events still held in the jobs' histories.
    #[arg(long)]
    pub replay: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

/// One event as `watch` prints it.
pub fn event_line(e: &v1::Event) -> String {
    let subject = match (e.job.is_empty(), e.node.is_empty()) {
        (false, _) => e.job.as_str(),
        (true, false) => e.node.as_str(),
        (true, true) => "-",
    };
    format!("{}  {}  {subject}  {}\n", timestamp(e.at_ms), event_kind(e), e.message)
}

fn render(format: Format, e: &v1::Event) -> String {
    match format {
        Format::Table => event_line(e),
        Format::Json => format!("{}\n", e.to_data()),
        Format::Yaml => format!("---\n{}", yaml_text(&e.to_data())),
    }
}

pub async fn run(conn: &Conn, a: &WatchArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let job = a.job.clone().unwrap_or_default();
    let req = v1::WatchRequest { job: job.clone(), replay: a.replay };
    let mut stream = conn
        .call(Subject::Job, &job, |mut c| {
            let r = req.clone();
            async move { c.watch(r).await }
        })
        .await?;
    loop {
        match stream.message().await {
            Ok(Some(e)) => {
                out.write_all(render(a.output, &e).as_bytes())?;
                out.flush()?;
            }
            Ok(None) => {
                return Err(ClientError::Stream(
                    "the replica ended the watch (it may be shutting down); run baton watch again, \
                     with --replay to see what was missed"
                        .into(),
                ));
            }
            Err(s) => return Err(ClientError::Stream(broken(&s))),
        }
    }
}

/// What to say of a watch the replica ended with an error: retrying helps, except when the
/// caller's token no longer lets it in (revoked, or its rights taken back).
fn broken(s: &tonic::Status) -> String {
    match s.code() {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => format!(
            "the watch was ended: {}; this token no longer lets you watch (baton whoami says who you are)",
            s.message()
        ),
        _ => format!("the watch broke: {}; run baton watch again, with --replay to see what was missed", s.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_ended_for_a_revoked_token_does_not_say_to_run_it_again() {
        let revoked = broken(&tonic::Status::unauthenticated("token 3 of user alice was revoked"));
        assert!(revoked.contains("was revoked") && !revoked.contains("again"), "{revoked}");
        let lost = broken(&tonic::Status::unavailable("connection reset"));
        assert!(lost.contains("run baton watch again"), "{lost}");
    }

    #[test]
    fn event_lines_read_as_documented() {
        let e = v1::Event {
            at_ms: 1_795_341_601_234,
            job: "train-1".into(),
            node: String::new(),
            kind: v1::EventKind::Started.into(),
            message: "attempt 1 started on n1[0-3]".into(),
            ..Default::default()
        };
        assert_eq!(event_line(&e), "2026-11-22T10:00:01.234Z  Started  train-1  attempt 1 started on n1[0-3]\n");
    }
}
