//! Arrays in `baton list` (one line each, or every element with `--expand`) and in
//! `baton cancel` (every unfinished element of the array).

use baton_proto::v1;

use crate::client::Conn;
use crate::client::error::{ClientError, Subject};
use crate::client::human::age;

/// Every array the caller may see (in `queue`, when given).
pub async fn list_arrays(conn: &Conn, queue: Option<&str>) -> Result<Vec<v1::JobArray>, ClientError> {
    let r = v1::ListArraysRequest { queue: queue.unwrap_or_default().to_string() };
    let reply = conn
        .call(Subject::Other, "", |mut c| {
            let r = r.clone();
            async move { c.list_arrays(r).await }
        })
        .await?;
    Ok(reply.arrays)
}

/// The newest array of that name (or id), finished or not. A name is taken again only once
/// its array finished, so an unfinished array of that name is the newest.
pub async fn find(conn: &Conn, name: &str) -> Result<Option<v1::JobArray>, ClientError> {
    let id: Option<u64> = name.parse().ok();
    Ok(list_arrays(conn, None).await?.into_iter().rev().find(|a| a.name == name || Some(a.id) == id))
}

/// `baton describe` of an array.
pub fn describe_text(a: &v1::JobArray, now: u64) -> String {
    let spec = a.array.unwrap_or_default();
    let max = if spec.max_running > 0 { spec.max_running.to_string() } else { "none".into() };
    let state = if a.cancelled_whole {
        "cancelled"
    } else if a.finished_ms > 0 {
        "ended"
    } else {
        "unfinished"
    };
    let mut rows = vec![
        ("Array", format!("{} (id {}), {state}", range_name(a), a.id)),
        ("Queue", a.queue.clone()),
        ("Elements", format!("{}, at most {max} unfinished at once; {} created as jobs so far", spec.count, a.created)),
        ("Counts", counts(a)),
        ("Submitted", format!("{} ago", age(a.submitted_ms, now))),
    ];
    if !a.owner.is_empty() {
        rows.push(("Owner", a.owner.clone()));
    }
    if !a.reason.is_empty() {
        rows.push(("Waiting", a.reason.clone()));
    }
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{:<12} {v}\n", format!("{k}:")));
    }
    out.push_str(&format!(
        "Elements are jobs {}-{} .. {}-{}: `baton describe {}-{}`\n",
        a.name,
        spec.first,
        a.name,
        spec.first + spec.count.saturating_sub(1),
        a.name,
        spec.first
    ));
    out
}

/// `train-[0-999]`.
pub fn range_name(a: &v1::JobArray) -> String {
    let spec = a.array.unwrap_or_default();
    let last = spec.first + spec.count.saturating_sub(1);
    format!("{}-[{}-{last}]", a.name, spec.first)
}

/// "50 running, 900 pending, 50 done (2 failed)".
pub fn counts(a: &v1::JobArray) -> String {
    let done = a.succeeded + a.failed + a.cancelled;
    let mut s = format!("{} running, {} pending, {done} done", a.running, a.pending);
    if a.other > 0 {
        s = format!("{} running, {} stopping or held, {} pending, {done} done", a.running, a.other, a.pending);
    }
    let mut bad = Vec::new();
    if a.failed > 0 {
        bad.push(format!("{} failed", a.failed));
    }
    if a.cancelled > 0 {
        bad.push(format!("{} cancelled", a.cancelled));
    }
    if !bad.is_empty() {
        s.push_str(&format!(" ({})", bad.join(", ")));
    }
    s
}

/// The table row of an array, in `baton list`'s columns.
pub fn row(a: &v1::JobArray, now: u64) -> Vec<String> {
    let state = if a.cancelled_whole {
        "Cancelled"
    } else if a.finished_ms > 0 {
        "Ended"
    } else {
        "Array"
    };
    let mut reason = counts(a);
    if !a.reason.is_empty() && a.pending > 0 {
        reason.push_str(&format!("; {}", a.reason));
    }
    let spec = a.array.unwrap_or_default();
    let max = if spec.max_running > 0 { format!("%{}", spec.max_running) } else { String::new() };
    vec![
        a.id.to_string(),
        format!("{}{max}", range_name(a)),
        a.queue.clone(),
        state.into(),
        "-".into(),
        "-".into(),
        age(a.submitted_ms, now),
        "-".into(),
        reason,
    ]
}

/// The elements of `a` not created yet, as the rows `--expand` shows: each pending, with
/// the array's reason.
pub fn not_created_rows(a: &v1::JobArray, now: u64) -> Vec<Vec<String>> {
    let spec = a.array.unwrap_or_default();
    if a.cancelled_whole || a.created >= spec.count {
        return Vec::new();
    }
    let first = spec.first + a.created;
    let last = spec.first + (spec.count - 1);
    (first..=last)
        .map(|i| {
            let name = format!("{}-{i}", a.name);
            vec![
                "-".into(),
                name,
                a.queue.clone(),
                "Pending".into(),
                "-".into(),
                "-".into(),
                age(a.submitted_ms, now),
                "-".into(),
                a.reason.clone(),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array() -> v1::JobArray {
        v1::JobArray {
            id: 9,
            name: "train".into(),
            queue: "q".into(),
            array: Some(v1::ArraySpec { first: 0, count: 1000, max_running: 50 }),
            running: 50,
            pending: 900,
            succeeded: 48,
            failed: 2,
            created: 102,
            reason: "at most 50 run at once".into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_array_is_one_line_with_its_counts() {
        let a = array();
        assert_eq!(range_name(&a), "train-[0-999]");
        assert_eq!(counts(&a), "50 running, 900 pending, 50 done (2 failed)");
        let r = row(&a, 0);
        assert_eq!(r[1], "train-[0-999]%50");
    }

    #[test]
    fn expanding_lists_every_element_not_created_yet() {
        let rows = not_created_rows(&array(), 0);
        assert_eq!(rows.len(), 898);
        assert_eq!(rows[0][1], "train-102");
        assert_eq!(rows.last().unwrap()[1], "train-999");
    }
}
