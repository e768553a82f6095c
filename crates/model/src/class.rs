//! Priority classes: a value and whether jobs of the class may be preempted.

use serde::{Deserialize, Serialize};

use crate::name::Name;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityClass {
    pub name: Name,
    pub value: i32,
    pub preemptible: bool,
}

/// Run:ai's four classes (seed 000): inference and build are never preempted and never borrow.
/// The class a job gets when it names none: by the API, `baton submit` and scenario files.
pub const DEFAULT_CLASS: &str = "train";

pub fn default_classes() -> Vec<PriorityClass> {
    let class = |name: &str, value, preemptible| PriorityClass { name: Name::lit(name), value, preemptible };
    vec![
        class("inference", 125, false),
        class("build", 100, false),
        class("interactive", 75, true),
        class(DEFAULT_CLASS, 50, true),
    ]
}
