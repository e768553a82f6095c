//! Topology levels and each node's domains (decisions.md section 10): `SetTopologyLevels`
//! declares the levels above the node, `SetNodeDomains` names a node's domain at each
//! declared level other than the rack (its rack is its registration's). Both rebuild the
//! ledger, which holds each node's domain at every level as an index.

use std::collections::BTreeMap;

use super::State;
use crate::error::ApplyError;
use crate::limits::MAX_NODES_PER_COMMAND;
use crate::name::Name;
use crate::topology::{ClusterTopology, LevelName, MAX_TOPOLOGY_LEVELS};

impl State {
    /// The cluster's levels and the nodes' domains.
    pub fn topology(&self) -> &ClusterTopology {
        &self.topology
    }

    pub(crate) fn set_topology_levels(&mut self, levels: Vec<LevelName>) -> Result<(), ApplyError> {
        ClusterTopology::check_levels(&levels).map_err(|e| ApplyError::invalid("topology_levels", e))?;
        let mut next = self.topology.clone();
        next.levels = levels;
        self.refuse_stranding(&next)?;
        self.topology = next;
        self.rebuild_ledger();
        Ok(())
    }

    pub(crate) fn set_node_domains(&mut self, nodes: Vec<(Name, BTreeMap<LevelName, Name>)>) -> Result<(), ApplyError> {
        if nodes.len() > MAX_NODES_PER_COMMAND {
            return Err(ApplyError::Limit(format!("at most {MAX_NODES_PER_COMMAND} nodes per command")));
        }
        // Every node checked before any changes: a refused command changes nothing.
        for (node, domains) in &nodes {
            if let Some(l) = domains.keys().find(|l| l.is_node() || l.is_rack()) {
                let why = if l.is_rack() { "a node's rack is its registration's (rack)" } else { "the node is itself" };
                return Err(ApplyError::invalid("topology", format!("node {node}, level {l}: {why}")));
            }
            if !self.d.nodes.contains_key(node) {
                return Err(ApplyError::unknown("node", node));
            }
            if domains.len() > MAX_TOPOLOGY_LEVELS {
                return Err(ApplyError::Limit(format!("at most {MAX_TOPOLOGY_LEVELS} topology levels per node")));
            }
        }
        for (node, domains) in nodes {
            if domains.is_empty() {
                self.topology.domains.remove(&node);
            } else {
                self.topology.domains.insert(node, domains);
            }
        }
        self.rebuild_ledger();
        Ok(())
    }

    /// A declaration that drops a level an unfinished job requires or prefers is refused,
    /// naming the job: its placement would mean nothing.
    fn refuse_stranding(&self, next: &ClusterTopology) -> Result<(), ApplyError> {
        for j in self.d.jobs.values().filter(|j| !j.state.is_finished()) {
            let Some(t) = j.spec.topology else { continue };
            if let crate::job::Topology::Levels(need) = t {
                next.check_need(&need).map_err(|e| {
                    ApplyError::invalid("topology_levels", format!("job {} ({}): {e}", j.id, j.spec.name))
                })?;
            } else if t == crate::job::Topology::Rack
                && next.position(&LevelName::new(crate::topology::RACK).expect("valid")).is_none()
            {
                return Err(ApplyError::invalid(
                    "topology_levels",
                    format!("job {} ({}) needs one rack, and rack would not be a level", j.id, j.spec.name),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn restore_topology<E: serde::de::Error>(&mut self, topology: ClusterTopology) -> Result<(), E> {
        ClusterTopology::check_levels(&topology.levels).map_err(E::custom)?;
        if topology.is_empty() {
            return Ok(());
        }
        self.topology = topology;
        self.rebuild_ledger();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::command::{Command, Op, Outcome};
    use crate::error::ApplyError;
    use crate::fixture::{gpu_job, gpu_node, gpu_queue, one_rank_per_node};
    use crate::job::{JobId, Topology};
    use crate::name::Name;
    use crate::plan::{Decision, Plan};
    use crate::rejection::Rejection;
    use crate::state::State;
    use crate::topology::{LevelName, LevelNeed};

    fn l(s: &str) -> LevelName {
        LevelName::new(s).unwrap()
    }

    fn apply(s: &mut State, op: Op) -> Result<Outcome, ApplyError> {
        s.apply(Command { now_ms: 0, op }).map(|a| a.outcome)
    }

    /// n1-n2 in NVLink domain nvl-a, n3-n4 in nvl-b, all in rack r1; 4 GPUs each.
    fn cluster() -> State {
        let mut s = State::new();
        for i in 1..=4 {
            let node = crate::node::NodeSpec { rack: Some(Name::lit("r1")), ..gpu_node(&format!("n{i}"), 4) };
            apply(&mut s, Op::RegisterNode(node)).unwrap();
        }
        apply(&mut s, Op::PutQueue(gpu_queue("q", 16))).unwrap();
        apply(&mut s, Op::SetTopologyLevels(vec![l("nvlink"), l("rack")])).unwrap();
        let domain = |d: &str| BTreeMap::from([(l("nvlink"), Name::lit(d))]);
        let nodes = (1..=4).map(|i| (Name::lit(&format!("n{i}")), domain(if i <= 2 { "nvl-a" } else { "nvl-b" })));
        apply(&mut s, Op::SetNodeDomains(nodes.collect())).unwrap();
        s
    }

    fn submit(s: &mut State, replicas: u32, topology: &str) -> Result<JobId, ApplyError> {
        let mut spec = gpu_job(&format!("gang-{}", s.applied()), "q", 4);
        spec.tasks[0].replicas = replicas;
        spec.topology = LevelNeed::parse(topology).unwrap();
        match apply(s, Op::Submit { spec, request_id: None })? {
            Outcome::Submitted { job, .. } => Ok(job),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_gang_larger_than_every_domain_or_naming_an_undeclared_level_is_refused_at_submit() {
        let mut s = cluster();
        let err = submit(&mut s, 3, "required=nvlink").unwrap_err();
        assert_eq!(
            err.to_string(),
            "impossible request: topology nvlink: the whole gang (12 gpu) fits in no single nvlink"
        );
        let err = submit(&mut s, 2, "required=zone").unwrap_err();
        assert!(
            err.to_string()
                .contains("topology: topology level zone is not one this cluster declares (it declares nvlink, rack)"),
            "{err}"
        );
        let err = submit(&mut s, 2, "required=nvlink,preferred=rack").unwrap_err();
        assert!(err.to_string().contains("preferred level rack is not below the required level nvlink"), "{err}");
        assert!(submit(&mut s, 2, "required=nvlink").is_ok());
        let wide = submit(&mut s, 4, "required=rack,preferred=nvlink");
        assert!(wide.is_ok(), "{wide:?}");
    }

    #[test]
    fn the_plan_checker_refuses_a_placement_that_spans_the_required_level() {
        let mut s = cluster();
        let job = submit(&mut s, 2, "required=nvlink").unwrap();
        let plan = |replicas| Plan { based_on: 0, decisions: vec![Decision::Place { job, attempt: 1, replicas }] };
        // n2 and n3: one in each NVLink domain.
        let mut across = one_rank_per_node(2, 4);
        across[0].node = Name::lit("n2");
        across[1].node = Name::lit("n3");
        let mut p = plan(across);
        p.based_on = s.applied();
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(p)).unwrap() else { panic!() };
        assert_eq!(rejected, vec![(0, Rejection::SpansDomains { level: "nvlink".into() })]);
        let mut p = plan(one_rank_per_node(2, 4));
        p.based_on = s.applied();
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(p)).unwrap() else { panic!() };
        assert!(rejected.is_empty(), "n1 and n2 share nvl-a: {rejected:?}");
    }

    #[test]
    fn levels_a_waiting_job_needs_cannot_be_dropped_and_domains_name_only_known_nodes() {
        let mut s = cluster();
        submit(&mut s, 2, "required=nvlink").unwrap();
        let err = apply(&mut s, Op::SetTopologyLevels(vec![l("rack")])).unwrap_err();
        assert!(
            err.to_string().contains("job 1 (gang-7): topology level nvlink is not one this cluster declares"),
            "{err}"
        );
        let err = apply(&mut s, Op::SetNodeDomains(vec![(Name::lit("n9"), BTreeMap::new())])).unwrap_err();
        assert!(err.to_string().contains("n9"), "{err}");
        let rack = BTreeMap::from([(l("rack"), Name::lit("r2"))]);
        let err = apply(&mut s, Op::SetNodeDomains(vec![(Name::lit("n1"), rack)])).unwrap_err();
        assert!(err.to_string().contains("rack is its registration's"), "{err}");
        assert!(apply(&mut s, Op::SetTopologyLevels(vec![l("rack")])).is_err());
        assert!(apply(&mut s, Op::SetTopologyLevels(vec![l("node")])).is_err());
    }

    #[test]
    fn the_topology_round_trips_through_a_snapshot() {
        let config = bincode::config::standard();
        let s = cluster();
        let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
        // No replica removed: format 15's layout, which the codec reads as such.
        let back = bincode::serde::decode_from_slice::<crate::state::PreRetiredState, _>(&bytes, config).unwrap().0.0;
        assert_eq!(back, s);
        assert_eq!(back.ledger().levels.len(), 2, "the ledger's levels are rebuilt");
        let n3 = back.ledger().node("n3").unwrap();
        assert_eq!(back.ledger().levels[0].domain_text(back.ledger().nodes[n3].domains[0]), "nvl-b/r1");
        // Without levels the state keeps format 11's layout: `rank_saves`' tests read their
        // states back as `PreTopologyState`.
        assert_eq!(Topology::Rack.text(), "rack");
    }
}
