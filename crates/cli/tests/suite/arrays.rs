//! Arrays from the command line (decisions.md section 13), against a fake server: what
//! `submit --array` sends, `list` with one line per array or each element (`--expand`),
//! `cancel` of an array's name, and what is refused before anything is sent.

use crate::fake;

use baton_proto::v1;
use fake::{Fake, job, parse_error, run, serve_baton};

fn sweep() -> v1::JobArray {
    v1::JobArray {
        id: 40,
        name: "sweep".into(),
        queue: "q".into(),
        array: Some(v1::ArraySpec { first: 0, count: 1000, max_running: 50 }),
        running: 1,
        pending: 998,
        succeeded: 1,
        created: 2,
        reason: "at most 50 elements run at once (max_running); the next is created as one ends".into(),
        ..Default::default()
    }
}

fn with_an_array() -> Fake {
    Fake::with(|s| {
        let mut e = job(41, "sweep-1", "q", "Running", &[("n1", &[0])]);
        e.array = "sweep".into();
        e.array_index = Some(1);
        s.jobs.push(e);
        s.jobs.push(job(7, "solo", "q", "Pending", &[]));
        s.arrays.push(sweep());
    })
}

#[test]
fn submit_with_array_sends_the_range_and_the_bound() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let args = ["submit", "--server", &server.addr(), "--name", "sweep", "--queue", "q", "--array", "0-999%50"];
    let (r, out) = run(&[&args[..], &["--", "python", "train.py"]].concat());
    r.unwrap();
    assert_eq!(out, "submitted array sweep of 1000 jobs (id 1)\n");
    let s = fake.state();
    assert_eq!(s.submits[0].array, Some(v1::ArraySpec { first: 0, count: 1000, max_running: 50 }));
}

#[test]
fn a_bad_range_is_refused_naming_what_is_wrong() {
    for (bad, says) in [("9-5", "reversed"), ("0-9%0", "max_running"), ("x", "count"), ("0", "at least one")] {
        let e = parse_error(&["submit", "--name", "a", "--queue", "q", "--array", bad, "--", "true"]);
        assert!(e.contains("--array") && e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn list_shows_an_array_as_one_line_and_expand_shows_each_element() {
    let fake = with_an_array();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["list", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("sweep-[0-999]%50"), "{out}");
    assert!(out.contains("1 running, 998 pending, 1 done"), "{out}");
    assert!(!out.contains("sweep-1 "), "an element is inside its array's line: {out}");
    assert!(out.contains("solo"), "{out}");
    let (r, out) = run(&["list", "--server", &server.addr(), "--expand"]);
    r.unwrap();
    assert!(out.contains("sweep-1 "), "{out}");
    assert!(out.contains("sweep-2 ") && out.contains("sweep-999 "), "not created yet, shown pending: {out}");
    assert_eq!(out.lines().count(), 1 + 2 + 998, "a header, two jobs, 998 elements not created");
}

#[test]
fn describe_of_an_arrays_name_shows_the_array() {
    let fake = with_an_array();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["describe", "sweep", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Array:") && out.contains("sweep-[0-999] (id 40), unfinished"), "{out}");
    assert!(out.contains("1000, at most 50 unfinished at once"), "{out}");
    assert!(out.contains("1 running, 998 pending, 1 done"), "{out}");
    let (r, _) = run(&["describe", "nope", "--server", &server.addr()]);
    assert!(r.unwrap_err().to_string().contains("unknown job"), "a name of neither is unknown");
}

#[test]
fn describe_of_an_element_names_its_array_and_index() {
    let fake = with_an_array();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["describe", "sweep-1", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Array:") && out.contains("sweep, element 1 (BATON_ARRAY_INDEX=1)"), "{out}");
}

#[test]
fn cancel_of_an_arrays_name_cancels_the_array() {
    let fake = with_an_array();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["cancel", "sweep", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "array sweep-[0-999] cancelled (999 unfinished elements)\n");
    let s = fake.state();
    assert_eq!(s.acted_on, vec![v1::JobRef { name: "sweep".into(), id: 40 }]);
}
