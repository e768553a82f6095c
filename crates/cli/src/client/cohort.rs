//! `baton cohort list|create|delete`: groups of queues that lend and borrow quota.

use std::io::Write;

use baton_proto::{convert, v1};
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct CohortArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: CohortCmd,
}

#[derive(Subcommand, Debug)]
pub enum CohortCmd {
    /// List cohorts.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Create a cohort.
    Create {
        name: String,
        /// The cohort this one nests in (its queues can borrow from there too).
        #[arg(long)]
        parent: Option<String>,
        /// Share what is lent by fair share among the cohort's queues.
        #[arg(long)]
        fair_sharing: bool,
    },
    /// Delete a cohort (no queue or cohort may still name it).
    Delete { name: String },
}

pub async fn list_cohorts(conn: &Conn) -> Result<v1::ListCohortsReply, ClientError> {
    conn.call(Subject::Other, "", |mut c| async move { c.list_cohorts(v1::Empty {}).await }).await
}

pub async fn run(conn: &Conn, a: &CohortArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        CohortCmd::List { output } => {
            let reply = list_cohorts(conn).await?;
            emit(out, *output, reply.cohorts.as_slice(), |cs| {
                if cs.is_empty() {
                    return "no cohorts\n".into();
                }
                let mut t = Table::new(&["NAME", "PARENT", "FAIR-SHARING"]);
                for c in cs {
                    let parent = if c.parent.is_empty() { "-".into() } else { c.parent.clone() };
                    t.row(vec![c.name.clone(), parent, if c.fair_sharing { "yes" } else { "no" }.into()]);
                }
                t.render()
            })
        }
        CohortCmd::Create { name, parent, fair_sharing } => {
            let c = v1::Cohort {
                name: name.clone(),
                parent: parent.clone().unwrap_or_default(),
                fair_sharing: *fair_sharing,
            };
            convert::cohort_from_proto(&c).map_err(|e| ClientError::Usage(e.to_string()))?;
            // The server refuses a taken name (see `baton class create`).
            let created = conn
                .call(Subject::Cohort, name, |mut cl| {
                    let c = c.clone();
                    async move { cl.create_cohort(c).await }
                })
                .await;
            let ack = match created {
                Err(ClientError::Exists(_)) => return Err(ClientError::Usage(format!("cohort {name} already exists"))),
                other => other?,
            };
            print_ack(out, &ack, &format!("cohort {name} created"))
        }
        CohortCmd::Delete { name } => {
            let r = v1::NameRef { name: name.clone() };
            let ack = conn
                .call(Subject::Cohort, name, |mut c| {
                    let r = r.clone();
                    async move { c.delete_cohort(r).await }
                })
                .await?;
            print_ack(out, &ack, &format!("cohort {name} deleted"))
        }
    }
}
