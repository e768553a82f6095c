//! Topology levels (decisions.md section 10): the cluster declares its levels above the node,
//! lowest first (`[nvlink, rack, zone]`; none declared is `[rack]`), each node names its
//! domain at each, and a gang requires one level and may prefer another.
//!
//! A domain is its path: `r1` under zone `z1` and `r1` under `z2` are two racks. A node that
//! names no domain at a level sits, at that level, in its pool's unnamed domain (as a node
//! with no rack always did).
//!
//! Level names are held inline ([`LevelName`], at most [`MAX_LEVEL_NAME_LEN`] bytes) so that
//! a job's topology stays a small `Copy` value the scheduler can key its caches by.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::name::Name;

/// Longest level name.
pub const MAX_LEVEL_NAME_LEN: usize = 15;
/// Most levels a cluster declares (NVLink domain, block, rack, spine, zone, region fit).
pub const MAX_TOPOLOGY_LEVELS: usize = 6;
/// The node itself: a level every cluster has, below every declared one.
pub const NODE: &str = "node";
/// The level a cluster has when it declares none.
pub const RACK: &str = "rack";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error(
        "bad topology level {0:?}: use lowercase letters, digits, '-' and '_', at most {MAX_LEVEL_NAME_LEN} characters"
    )]
    BadLevel(String),
    #[error("topology level {0:?} is declared twice")]
    Repeated(String),
    #[error("topology level \"node\" is the node itself: declare only the levels above it")]
    NodeDeclared,
    #[error("bad topology {0:?}: use required=LEVEL and preferred=LEVEL, comma-separated")]
    BadKey(String),
    #[error("at most {MAX_TOPOLOGY_LEVELS} topology levels")]
    TooMany,
    #[error("preferred: node is what placement does anyway (the fewest nodes first); prefer a level above the node")]
    PreferredNode,
    #[error("a gang required on one node prefers nothing above it (drop preferred, or require a level above the node)")]
    NodeAndPreferred,
    #[error("preferred level {preferred} is not below the required level {required}: it could change nothing")]
    PreferredNotBelow { preferred: String, required: String },
    #[error("topology level {level} is not one this cluster declares (it declares {declared})")]
    Undeclared { level: String, declared: String },
}

/// A level's name, held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelName {
    len: u8,
    bytes: [u8; MAX_LEVEL_NAME_LEN],
}

impl LevelName {
    pub fn new(text: &str) -> Result<LevelName, TopologyError> {
        let ok = !text.is_empty()
            && text.len() <= MAX_LEVEL_NAME_LEN
            && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(TopologyError::BadLevel(text.to_string()));
        }
        let mut bytes = [0u8; MAX_LEVEL_NAME_LEN];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Ok(LevelName { len: text.len() as u8, bytes })
    }

    pub fn as_str(&self) -> &str {
        // Only `new` builds one, from checked ASCII.
        std::str::from_utf8(&self.bytes[..self.len as usize]).expect("level names are ASCII")
    }

    pub fn is_node(&self) -> bool {
        self.as_str() == NODE
    }

    pub fn is_rack(&self) -> bool {
        self.as_str() == RACK
    }
}

impl fmt::Debug for LevelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for LevelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Encoded as its text, so a log or snapshot reads like any other name.
impl Serialize for LevelName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LevelName {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let text = String::deserialize(de)?;
        LevelName::new(&text).map_err(serde::de::Error::custom)
    }
}

/// What a gang asks of the topology beyond the shorthand `node|rack`: a level every replica
/// shares a domain of, and a level it would rather not span. Built by [`LevelNeed::topology`],
/// which keeps the shorthand's cases out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LevelNeed {
    pub required: Option<LevelName>,
    pub preferred: Option<LevelName>,
}

/// The cluster's declared levels and each node's domains at the levels other than the rack
/// (a node's rack is its spec's `rack`). Empty: the cluster declares none, so it has `[rack]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTopology {
    /// Declared levels, lowest first; empty for the default `[rack]`.
    pub levels: Vec<LevelName>,
    /// Per node, its domain's name at each declared level other than `rack`.
    pub domains: BTreeMap<Name, BTreeMap<LevelName, Name>>,
}

impl ClusterTopology {
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty() && self.domains.is_empty()
    }

    /// The levels in force, lowest first: the declared ones, or `[rack]`.
    pub fn levels(&self) -> Vec<LevelName> {
        if self.levels.is_empty() { vec![LevelName::new(RACK).expect("valid")] } else { self.levels.clone() }
    }

    /// Position of `level` among the levels in force.
    pub fn position(&self, level: &LevelName) -> Option<usize> {
        self.levels().iter().position(|l| l == level)
    }

    /// Checks a declaration: valid, distinct names, not `node`, within the bound.
    pub fn check_levels(levels: &[LevelName]) -> Result<(), TopologyError> {
        if levels.len() > MAX_TOPOLOGY_LEVELS {
            return Err(TopologyError::TooMany);
        }
        for (i, l) in levels.iter().enumerate() {
            if l.is_node() {
                return Err(TopologyError::NodeDeclared);
            }
            if levels[..i].contains(l) {
                return Err(TopologyError::Repeated(l.to_string()));
            }
        }
        Ok(())
    }

    /// Checks a gang's levels against the levels in force: each declared, and the preferred
    /// one below the required one.
    pub fn check_need(&self, need: &LevelNeed) -> Result<(), TopologyError> {
        let pos = |l: &LevelName| -> Result<usize, TopologyError> {
            if l.is_node() {
                return Ok(0);
            }
            self.position(l).map(|p| p + 1).ok_or_else(|| TopologyError::Undeclared {
                level: l.to_string(),
                declared: self.levels().iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "),
            })
        };
        let required = need.required.as_ref().map(pos).transpose()?;
        let preferred = need.preferred.as_ref().map(pos).transpose()?;
        if let (Some(r), Some(p)) = (required, preferred) {
            if p >= r {
                return Err(TopologyError::PreferredNotBelow {
                    preferred: need.preferred.expect("set").to_string(),
                    required: need.required.expect("set").to_string(),
                });
            }
        }
        Ok(())
    }

    /// Node `node`'s domain path at each level in force, lowest level first: at level `i`,
    /// the names from level `i` up (`None` where the node names none at that level).
    pub fn paths(&self, node: &Name, rack: Option<&Name>) -> Vec<Vec<Option<Name>>> {
        let levels = self.levels();
        let own = self.domains.get(node);
        let names: Vec<Option<Name>> = levels
            .iter()
            .map(|l| if l.is_rack() { rack.cloned() } else { own.and_then(|d| d.get(l).cloned()) })
            .collect();
        (0..levels.len()).map(|i| names[i..].to_vec()).collect()
    }
}

impl LevelNeed {
    /// A gang's levels, or the shorthand they amount to. `Ok(None)`: nothing asked.
    pub fn topology(
        required: Option<LevelName>,
        preferred: Option<LevelName>,
    ) -> Result<Option<crate::job::Topology>, TopologyError> {
        use crate::job::Topology as T;
        if preferred.is_some_and(|p| p.is_node()) {
            return Err(TopologyError::PreferredNode);
        }
        match (required, preferred) {
            (None, None) => Ok(None),
            (Some(r), None) if r.is_node() => Ok(Some(T::Node)),
            (Some(r), None) if r.is_rack() => Ok(Some(T::Rack)),
            (Some(r), Some(_)) if r.is_node() => Err(TopologyError::NodeAndPreferred),
            (required, preferred) => Ok(Some(T::Levels(LevelNeed { required, preferred }))),
        }
    }

    /// Parses `required=nvlink,preferred=rack`, `nvlink` (required), or the shorthand.
    pub fn parse(text: &str) -> Result<Option<crate::job::Topology>, TopologyError> {
        let (mut required, mut preferred) = (None, None);
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("required", l)) => required = Some(LevelName::new(l.trim())?),
                Some(("preferred", l)) => preferred = Some(LevelName::new(l.trim())?),
                Some(_) => return Err(TopologyError::BadKey(part.to_string())),
                None => required = Some(LevelName::new(part)?),
            }
        }
        LevelNeed::topology(required, preferred)
    }
}

impl crate::job::Topology {
    /// The level every replica shares a domain of, if any.
    pub fn required(&self) -> Option<LevelName> {
        match self {
            crate::job::Topology::Node => Some(LevelName::new(NODE).expect("valid")),
            crate::job::Topology::Rack => Some(LevelName::new(RACK).expect("valid")),
            crate::job::Topology::Levels(n) => n.required,
        }
    }

    pub fn preferred(&self) -> Option<LevelName> {
        match self {
            crate::job::Topology::Levels(n) => n.preferred,
            _ => None,
        }
    }

    /// `node`, `rack`, or `required=nvlink,preferred=rack`: what `parse` reads back.
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.required() {
            parts.push(format!("required={r}"));
        }
        if let Some(p) = self.preferred() {
            parts.push(format!("preferred={p}"));
        }
        match self {
            crate::job::Topology::Node => NODE.to_string(),
            crate::job::Topology::Rack => RACK.to_string(),
            crate::job::Topology::Levels(_) => parts.join(","),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Topology as T;

    fn l(s: &str) -> LevelName {
        LevelName::new(s).unwrap()
    }

    #[test]
    fn the_shorthand_cases_stay_shorthand() {
        assert_eq!(LevelNeed::parse("node").unwrap(), Some(T::Node));
        assert_eq!(LevelNeed::parse("required=rack").unwrap(), Some(T::Rack));
        assert_eq!(LevelNeed::parse("").unwrap(), None);
        let t = LevelNeed::parse("required=nvlink, preferred=rack").unwrap().unwrap();
        assert_eq!(t, T::Levels(LevelNeed { required: Some(l("nvlink")), preferred: Some(l("rack")) }));
        assert_eq!(LevelNeed::parse(&t.text()).unwrap(), Some(t));
        assert_eq!(LevelNeed::parse("preferred=node"), Err(TopologyError::PreferredNode));
        assert!(LevelNeed::parse("required=NVLink").is_err());
        assert!(LevelNeed::parse("wanted=rack").is_err());
    }

    #[test]
    fn levels_are_checked_against_the_declaration() {
        let topo = ClusterTopology { levels: vec![l("nvlink"), l("rack"), l("zone")], domains: BTreeMap::new() };
        let need = |r: &str, p: Option<&str>| LevelNeed { required: Some(l(r)), preferred: p.map(l) };
        assert_eq!(topo.check_need(&need("zone", Some("nvlink"))), Ok(()));
        assert!(matches!(topo.check_need(&need("nvlink", Some("zone"))), Err(TopologyError::PreferredNotBelow { .. })));
        let err = topo.check_need(&need("block", None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topology level block is not one this cluster declares (it declares nvlink, rack, zone)"
        );
        assert!(ClusterTopology::default().check_need(&need("nvlink", None)).is_err());
        assert_eq!(ClusterTopology::check_levels(&[l("rack"), l("rack")]), Err(TopologyError::Repeated("rack".into())));
        assert_eq!(ClusterTopology::check_levels(&[l("node")]), Err(TopologyError::NodeDeclared));
    }

    #[test]
    fn a_domain_is_its_path() {
        let mut topo = ClusterTopology { levels: vec![l("nvlink"), l("rack"), l("zone")], domains: BTreeMap::new() };
        let n = Name::new("g1").unwrap();
        topo.domains.insert(
            n.clone(),
            [(l("nvlink"), Name::new("nvl-1").unwrap()), (l("zone"), Name::new("z1").unwrap())].into(),
        );
        let r1 = Name::new("r1").unwrap();
        let paths = topo.paths(&n, Some(&r1));
        let name = |s: &str| Some(Name::new(s).unwrap());
        assert_eq!(paths[0], vec![name("nvl-1"), name("r1"), name("z1")]);
        assert_eq!(paths[1], vec![name("r1"), name("z1")]);
        assert_eq!(paths[2], vec![name("z1")]);
        assert_eq!(ClusterTopology::default().paths(&n, Some(&r1)), vec![vec![name("r1")]]);
    }
}
