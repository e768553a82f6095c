//! A replica's two addresses, as the membership records them: the API address (clients and
//! agents; what a replica that does not lead redirects them to) and the peer address (the
//! raft transport, which only replica certificates may call).
//!
//! The membership keeps one string per member (openraft's `BasicNode`), so both live in it:
//! `API` when the replica serves raft on its API port, as every replica did before the peer
//! port existed, or `API/PEER` when it has a peer port of its own (`baton server
//! --peer-listen`). A host name or `host:port` never holds a `/`, so an old membership, in a
//! snapshot or a log entry, reads as a replica whose two addresses are one: nothing in the
//! data format changes.

use serde::{Deserialize, Serialize};

/// Between the API and the peer address in a member's address.
pub const PEER_SEPARATOR: char = '/';

/// The addresses of one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addrs {
    /// Where clients and agents reach it (`host:port`).
    pub api: String,
    /// Where other replicas reach its raft transport (`host:port`; the API address when it
    /// has no peer port of its own).
    pub peer: String,
}

impl Addrs {
    /// A replica serving raft on its API port.
    pub fn shared(addr: impl Into<String>) -> Addrs {
        let addr = addr.into();
        Addrs { peer: addr.clone(), api: addr }
    }

    /// Reads a member's address as the membership holds it (`API` or `API/PEER`).
    pub fn parse(member: &str) -> Addrs {
        match member.split_once(PEER_SEPARATOR) {
            Some((api, peer)) => Addrs { api: api.to_string(), peer: peer.to_string() },
            None => Addrs::shared(member),
        }
    }

    /// The member's address as the membership holds it: `API` when both are one.
    pub fn to_member(&self) -> String {
        if self.api == self.peer { self.api.clone() } else { format!("{}{PEER_SEPARATOR}{}", self.api, self.peer) }
    }

    /// Checks a member's address as an operator wrote it (`--bootstrap`, `add-replica`):
    /// one or two non-empty addresses, none with a space.
    pub fn check_member(member: &str) -> Result<Addrs, String> {
        let bad = |why: &str| {
            Err(format!("replica address {member:?} {why}; expected HOST:PORT or API_HOST:PORT/PEER_HOST:PORT"))
        };
        if member.matches(PEER_SEPARATOR).count() > 1 {
            return bad("has more than one '/'");
        }
        if member.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("has a space or a control character");
        }
        let addrs = Addrs::parse(member);
        if addrs.api.is_empty() || addrs.peer.is_empty() {
            return bad("has an empty address");
        }
        Ok(addrs)
    }

    /// Whether `other` uses one of this replica's addresses.
    pub fn overlaps(&self, other: &Addrs) -> bool {
        [&self.api, &self.peer].iter().any(|a| **a == other.api || **a == other.peer)
    }
}

impl std::fmt::Display for Addrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.api == self.peer { write!(f, "{}", self.api) } else { write!(f, "{} (peer {})", self.api, self.peer) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_from_before_the_peer_port_is_both_addresses() {
        let a = Addrs::parse("10.0.0.1:7070");
        assert_eq!(a, Addrs { api: "10.0.0.1:7070".into(), peer: "10.0.0.1:7070".into() });
        // Written back as it was read: memberships of single-port replicas do not change.
        assert_eq!(a.to_member(), "10.0.0.1:7070");
    }

    #[test]
    fn a_peer_port_of_its_own_round_trips() {
        let a = Addrs { api: "h1:7070".into(), peer: "h1:7071".into() };
        assert_eq!(a.to_member(), "h1:7070/h1:7071");
        assert_eq!(Addrs::parse(&a.to_member()), a);
        assert_eq!(a.to_string(), "h1:7070 (peer h1:7071)");
    }

    #[test]
    fn a_malformed_member_address_is_refused_by_name() {
        for (text, why) in
            [("a/b/c", "more than one '/'"), ("h1:1/", "empty address"), ("/h1:1", "empty address"), ("h 1:1", "space")]
        {
            let e = Addrs::check_member(text).unwrap_err();
            assert!(e.contains(why) && e.contains(text), "{text}: {e}");
        }
        assert_eq!(Addrs::check_member("[::1]:7070/[::1]:7071").unwrap().peer, "[::1]:7071");
    }

    #[test]
    fn overlapping_addresses_are_found_in_either_place() {
        let a = Addrs { api: "h:1".into(), peer: "h:2".into() };
        assert!(a.overlaps(&Addrs::shared("h:2")));
        assert!(a.overlaps(&Addrs { api: "x:1".into(), peer: "h:1".into() }));
        assert!(!a.overlaps(&Addrs::shared("h:3")));
    }
}
