//! The partition network on this machine's kernel: a cut drops packets (one direction or
//! both), a heal lets them through again, and dropping the network removes its namespaces.
//! Needs root, `ip` and `nft`, so a plain `cargo test` ignores these tests; `./test.sh` runs
//! them where it is root and has both.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use baton_chaos::net::{HOST, Net, Rule, cut_between, one_way};

const PORT: u16 = 7300;
/// A connect that gets no answer within this is taken as cut (the cut drops the SYN, so no
/// answer ever comes; a live link answers within microseconds).
const CONNECT_MS: u64 = 1_000;

/// Runs `f` on a thread that entered namespace `ns` (a socket made there stays there).
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("the namespace's file");
    std::thread::spawn(move || {
        // SAFETY: setns(2) moves this thread only into the network namespace the open file
        // names; the file outlives the call.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the thread in the namespace")
}

fn listen(net: &Net, label: &str) -> TcpListener {
    let addr = SocketAddr::from((net.addr(label), PORT));
    in_ns(net.namespace(label), move || TcpListener::bind(addr).expect("a listener"))
}

/// Whether `from` (a label, or [`HOST`]) can open a connection to `to`'s listener.
fn reaches(net: &Net, from: &str, to: &str) -> bool {
    let addr = SocketAddr::from((net.addr(to), PORT));
    let connect = move || TcpStream::connect_timeout(&addr, Duration::from_millis(CONNECT_MS)).is_ok();
    if from == HOST { connect() } else { in_ns(net.namespace(from), connect) }
}

fn labels(l: &[&str]) -> Vec<String> {
    l.iter().map(|s| s.to_string()).collect()
}

#[test]
#[ignore = "needs root, ip and nft: ./test.sh runs it as root"]
fn cuts_drop_packets_heals_let_them_through_and_the_network_is_removed_after() {
    let net = Net::create(&["a", "b", "c"]).unwrap_or_else(|e| panic!("{e}"));
    let _listeners: Vec<TcpListener> = ["a", "b", "c"].iter().map(|l| listen(&net, l)).collect();
    assert!(reaches(&net, "a", "b") && reaches(&net, HOST, "c"), "every link is up at first");

    net.apply(&cut_between(&labels(&["a"]), &labels(&["b", HOST]))).unwrap();
    assert!(!reaches(&net, "a", "b") && !reaches(&net, "b", "a"), "a and b are cut both ways");
    assert!(!reaches(&net, HOST, "a"), "a is cut from the host");
    assert!(reaches(&net, "a", "c") && reaches(&net, "b", "c"), "c is cut from no one");

    // One way: c's packets to a vanish; a's to c pass, but c's answers (its SYN-ACK) do not,
    // so a connection from either side fails, as over a real one-way link.
    net.apply(&one_way(&labels(&["c"]), &labels(&["a"]))).unwrap();
    assert!(reaches(&net, "a", "b"), "the earlier cut was replaced");
    assert!(!reaches(&net, "c", "a") && !reaches(&net, "a", "c"));

    net.apply(&[Rule::Loss { who: "b".into(), percent: 100 }]).unwrap();
    assert!(!reaches(&net, "a", "b"), "a link that loses every packet carries none");

    net.apply(&[]).unwrap();
    assert!(reaches(&net, "c", "a") && reaches(&net, "a", "b") && reaches(&net, HOST, "a"), "healed");

    let namespaces = [net.namespace("a").to_string(), net.namespace("c").to_string()];
    drop(_listeners);
    drop(net);
    let left =
        String::from_utf8(std::process::Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
    for ns in namespaces {
        assert!(!left.lines().any(|l| l.split_whitespace().next() == Some(&ns)), "{ns} is left: {left}");
    }
}

#[test]
#[ignore = "needs root, ip and nft: ./test.sh runs it as root"]
fn a_network_is_removed_when_its_run_panics() {
    let ns = std::panic::catch_unwind(|| {
        let net = Net::create(&["a"]).unwrap_or_else(|e| panic!("{e}"));
        let ns = net.namespace("a").to_string();
        std::panic::panic_any(ns);
    })
    .expect_err("the run panicked");
    let ns = ns.downcast::<String>().expect("the namespace's name");
    assert!(!std::path::Path::new(&format!("/run/netns/{ns}")).exists(), "{ns} outlived the panic");
}

#[test]
#[ignore = "needs root, ip and nft: ./test.sh runs it as root"]
fn what_a_killed_run_left_behind_is_removed_by_the_next() {
    // The last slot: no run of these tests holds it (they take the lowest free ones).
    let n = baton_chaos::slot::SLOTS - 1;
    let stale = format!("bcs{n}-sw");
    let made = std::process::Command::new("ip").args(["netns", "add", &stale]).status().unwrap();
    assert!(made.success(), "ip netns add {stale}");
    let net = Net::create(&["a"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(!std::path::Path::new(&format!("/run/netns/{stale}")).exists(), "{stale} was not removed");
    drop(net);
}

/// Set in the child process of `networks_of_two_processes_at_once_stay_apart`.
const CHILD_ENV: &str = "BATON_CHAOS_NET_CHILD";

/// The other process of `networks_of_two_processes_at_once_stay_apart`: makes a network,
/// prints its slot, the namespace and address of its member `b`, and holds the network
/// until its standard input closes (or it is killed).
#[test]
#[ignore = "a helper: another test runs it in a child process"]
fn child_holding_a_network() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let net = Net::create(&["a", "b"]).unwrap_or_else(|e| panic!("{e}"));
    println!("NET {} {} {}", net.slot(), net.namespace("b"), net.addr("b"));
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
    drop(net);
}

fn exists(ns: &str) -> bool {
    std::path::Path::new(&format!("/run/netns/{ns}")).exists()
}

#[test]
#[ignore = "needs root, ip and nft: ./test.sh runs it as root"]
fn networks_of_two_processes_at_once_stay_apart() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holding_a_network", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child test process");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // The test harness prints the test's name on the same line, before it.
    let line = lines
        .find_map(|l| l.ok().and_then(|l| l.split_once("NET ").map(|(_, rest)| rest.to_string())))
        .expect("the child's network");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (their_slot, their_ns, their_addr) = (fields[0].to_string(), fields[1].to_string(), fields[2].to_string());

    // A network made while the other process holds its own: another slot, subnet and
    // names, and the other's namespaces are not taken for a dead run's leftovers.
    let net = Net::create(&["a", "b"]).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(net.slot().to_string(), their_slot);
    assert_ne!(net.namespace("b"), their_ns);
    let (mine, theirs): (std::net::Ipv4Addr, std::net::Ipv4Addr) = (net.addr("b"), their_addr.parse().unwrap());
    assert_ne!(u32::from(mine) >> 4, u32::from(theirs) >> 4, "{mine} and {theirs} share a /28");
    assert!(exists(&their_ns), "the live process's namespace {their_ns} was removed");
    let _listeners: Vec<TcpListener> = ["a", "b"].iter().map(|l| listen(&net, l)).collect();
    assert!(reaches(&net, "a", "b") && reaches(&net, HOST, "a"), "this network works beside the other");

    // Killed before its cleanup, the other process leaves its network behind; the next
    // network made removes it. That one has no member `b`, so whichever slot it takes (the
    // freed one, again, if no other test holds it), the namespace is not made again.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(exists(&their_ns), "a killed process cleans nothing");
    let next = Net::create(&["a"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(!exists(&their_ns), "{their_ns} of the killed process was left behind");
    let _listener = listen(&next, "a");
    assert!(reaches(&next, HOST, "a"), "the next network works");
    drop(next);
    drop(net);
}
