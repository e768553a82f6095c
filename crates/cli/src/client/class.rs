//! `baton class list|create|delete`: priority classes.

use std::io::Write;

use baton_proto::{convert, v1};
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct ClassArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: ClassCmd,
}

#[derive(Subcommand, Debug)]
pub enum ClassCmd {
    /// List priority classes, highest first.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Create a priority class.
    Create {
        name: String,
        /// The priority jobs of this class get (higher wins).
        #[arg(long, allow_negative_numbers = true)]
        value: i32,
        /// Jobs of this class may be preempted.
        #[arg(long)]
        preemptible: bool,
    },
    /// Delete a priority class.
    Delete { name: String },
}

pub async fn run(conn: &Conn, a: &ClassArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        ClassCmd::List { output } => {
            let mut reply =
                conn.call(Subject::Other, "", |mut c| async move { c.list_classes(v1::Empty {}).await }).await?;
            reply.classes.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.name.cmp(&b.name)));
            emit(out, *output, reply.classes.as_slice(), |cs| {
                if cs.is_empty() {
                    return "no priority classes\n".into();
                }
                let mut t = Table::new(&["NAME", "VALUE", "PREEMPTIBLE"]);
                for c in cs {
                    t.row(vec![c.name.clone(), c.value.to_string(), if c.preemptible { "yes" } else { "no" }.into()]);
                }
                t.render()
            })
        }
        ClassCmd::Create { name, value, preemptible } => {
            let c = v1::PriorityClass { name: name.clone(), value: *value, preemptible: *preemptible };
            convert::class_from_proto(&c).map_err(|e| ClientError::Usage(e.to_string()))?;
            // The server refuses a taken name (decided in the replicated state), so two
            // concurrent creates cannot both land as a list-then-put would let them.
            let created = conn
                .call(Subject::Class, name, |mut cl| {
                    let c = c.clone();
                    async move { cl.create_class(c).await }
                })
                .await;
            let ack = match created {
                Err(ClientError::Exists(_)) => {
                    return Err(ClientError::Usage(format!("priority class {name} already exists")));
                }
                other => other?,
            };
            print_ack(out, &ack, &format!("priority class {name} created"))
        }
        ClassCmd::Delete { name } => {
            let r = v1::NameRef { name: name.clone() };
            let ack = conn
                .call(Subject::Class, name, |mut c| {
                    let r = r.clone();
                    async move { c.delete_class(r).await }
                })
                .await?;
            print_ack(out, &ack, &format!("priority class {name} deleted"))
        }
    }
}
