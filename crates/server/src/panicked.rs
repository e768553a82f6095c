//! A task whose panic must end the server: the leader loop. Before this, a panic in a
//! scheduling cycle ended only the leader's task, and the replica went on as a leader that
//! never scheduled, directed no agent and kept its leadership: the whole cluster stalled
//! with every replica up (a chaos partitions run, chaos/README.md, "Found so far"). Ending
//! the process lets another replica lead and a supervisor (systemd, compose) restart this
//! one.

use std::any::Any;
use std::future::Future;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Spawns `task`; the receiver gets the panic's message if it panics, and is closed if it
/// ends without panicking.
pub(crate) fn spawn_watched<F>(task: F) -> (JoinHandle<()>, oneshot::Receiver<String>)
where
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let inner = tokio::spawn(task);
    let outer = tokio::spawn(async move {
        if let Err(e) = inner.await
            && e.is_panic()
        {
            let _ = tx.send(message(e.into_panic()));
        }
    });
    (outer, rx)
}

/// What the panic said (a panic's payload is the formatted message, or a literal).
fn message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_string(),
            Err(_) => "a panic without a message".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_reported_with_its_message() {
        let job = 619;
        let (handle, rx) = spawn_watched(async move { panic!("job {job} would over-allocate node n3") });
        assert_eq!(rx.await.as_deref(), Ok("job 619 would over-allocate node n3"));
        handle.await.expect("the watcher itself does not panic");

        let (_, rx) = spawn_watched(async { panic!("a literal") });
        assert_eq!(rx.await.as_deref(), Ok("a literal"));
    }

    #[tokio::test]
    async fn a_task_that_ends_reports_nothing() {
        let (handle, rx) = spawn_watched(async {});
        assert!(rx.await.is_err(), "closed without a message");
        handle.await.unwrap();
    }
}
