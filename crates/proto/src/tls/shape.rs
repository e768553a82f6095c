//! What an agent's certificate fixes of its node: the operator's word on its pool, rack and
//! the most of each resource it may declare. Without it an agent declares its node's shape
//! itself, and a stolen agent certificate could re-attach as a 64-GPU node of a protected
//! pool and receive other teams' jobs and environments.
//!
//! Carried as a URI in the certificate's subject alternative names, which the CA signs like
//! the rest: `baton-shape:pool=gpu;rack=r1;gpu=8;cpu=64000;memory=549755813888` (resources
//! in their smallest units: thousandths of a CPU, bytes). `pool` and `rack` are optional;
//! `labels=fixed` with `label.<key>=<value>` entries fixes the labels the node may declare
//! (only those, with those values); every other key is a resource's maximum.

use std::collections::BTreeMap;

/// The scheme of the subject alternative name that holds a shape.
pub const SHAPE_SCHEME: &str = "baton-shape:";
/// Entries one shape may have (pool, rack and resources): a certificate is not a database.
pub const MAX_SHAPE_ENTRIES: usize = 32;
/// The longest value or key in a shape.
pub const MAX_SHAPE_WORD: usize = 63;
/// The entry that says a shape fixes the node's labels (`labels=fixed`), even to none.
const LABELS_FIXED: &str = "fixed";
/// The prefix of an entry naming one label the node may declare.
const LABEL_PREFIX: &str = "label.";

/// A node's shape as its agent's certificate fixes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeShape {
    pub pool: Option<String>,
    pub rack: Option<String>,
    /// The most of each named resource the node may declare; resources not named are free.
    pub max: BTreeMap<String, u64>,
    /// The labels the node may declare, each with its value; `None`: its labels are free.
    pub labels: Option<BTreeMap<String, String>>,
}

impl NodeShape {
    /// The URI written into a certificate.
    pub fn to_uri(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        parts.extend(self.pool.iter().map(|p| format!("pool={p}")));
        parts.extend(self.rack.iter().map(|r| format!("rack={r}")));
        if let Some(labels) = &self.labels {
            parts.push(format!("labels={LABELS_FIXED}"));
            parts.extend(labels.iter().map(|(k, v)| format!("{LABEL_PREFIX}{k}={v}")));
        }
        parts.extend(self.max.iter().map(|(k, v)| format!("{k}={v}")));
        format!("{SHAPE_SCHEME}{}", parts.join(";"))
    }

    /// Reads the part after [`SHAPE_SCHEME`]; says which entry is wrong.
    pub fn parse(text: &str) -> Result<NodeShape, String> {
        let mut shape = NodeShape::default();
        let entries: Vec<&str> = text.split(';').filter(|e| !e.is_empty()).collect();
        if entries.len() > MAX_SHAPE_ENTRIES {
            return Err(format!("{} entries; a shape has at most {MAX_SHAPE_ENTRIES}", entries.len()));
        }
        for entry in entries {
            let (key, value) = entry.split_once('=').ok_or_else(|| format!("{entry:?} is not key=value"))?;
            let plain = |w: &str| {
                !w.is_empty()
                    && w.len() <= MAX_SHAPE_WORD
                    && w.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
            };
            if !plain(key) || !plain(value) {
                return Err(format!("{entry:?}: keys and values are letters, digits, '.', '_', '-', '/'"));
            }
            if key == "labels" {
                if value != LABELS_FIXED {
                    return Err(format!("{entry:?}: the only value of labels is {LABELS_FIXED}"));
                }
                shape.labels.get_or_insert_default();
                continue;
            }
            if let Some(label) = key.strip_prefix(LABEL_PREFIX) {
                let labels = shape.labels.get_or_insert_default();
                if label.is_empty() || labels.insert(label.to_string(), value.to_string()).is_some() {
                    return Err(format!("{entry:?}: a label is named once, with a key"));
                }
                continue;
            }
            let slot = match key {
                "pool" => &mut shape.pool,
                "rack" => &mut shape.rack,
                resource => {
                    let max =
                        value.parse().map_err(|_| format!("{entry:?}: {resource}'s maximum is not a whole number"))?;
                    if shape.max.insert(resource.to_string(), max).is_some() {
                        return Err(format!("{resource} is named twice"));
                    }
                    continue;
                }
            };
            if slot.replace(value.to_string()).is_some() {
                return Err(format!("{key} is named twice"));
            }
        }
        Ok(shape)
    }
}

/// The shape a DER certificate fixes, if it carries one.
pub fn shape_of(der: &[u8]) -> Result<Option<NodeShape>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let sans = cert.subject_alternative_name().map_err(|e| format!("its subject alternative names: {e}"))?;
    let uris = sans.iter().flat_map(|s| s.value.general_names.iter()).filter_map(|n| match n {
        GeneralName::URI(u) => u.strip_prefix(SHAPE_SCHEME),
        _ => None,
    });
    let mut found = None;
    for text in uris {
        if found.is_some() {
            return Err("it names two node shapes".into());
        }
        found = Some(NodeShape::parse(text).map_err(|e| format!("its node shape: {e}"))?);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_reads_back_what_was_written() {
        let shape = NodeShape {
            pool: Some("gpu".into()),
            rack: Some("r1".into()),
            max: BTreeMap::from([("gpu".into(), 8), ("cpu".into(), 64_000)]),
            labels: None,
        };
        let uri = shape.to_uri();
        assert_eq!(uri, "baton-shape:pool=gpu;rack=r1;cpu=64000;gpu=8");
        assert_eq!(NodeShape::parse(uri.strip_prefix(SHAPE_SCHEME).unwrap()), Ok(shape.clone()));
        assert_eq!(NodeShape::parse(""), Ok(NodeShape::default()));
        let labelled = NodeShape { labels: Some(BTreeMap::from([("zone".into(), "a".into())])), ..shape };
        let uri = labelled.to_uri();
        assert_eq!(uri, "baton-shape:pool=gpu;rack=r1;labels=fixed;label.zone=a;cpu=64000;gpu=8");
        assert_eq!(NodeShape::parse(uri.strip_prefix(SHAPE_SCHEME).unwrap()), Ok(labelled));
        let none = NodeShape::parse("labels=fixed").unwrap();
        assert_eq!(none.labels, Some(BTreeMap::new()), "fixed to no label at all");
    }

    #[test]
    fn a_bad_shape_names_its_entry() {
        assert!(NodeShape::parse("gpu=eight").unwrap_err().contains("gpu=eight"));
        assert!(NodeShape::parse("pool=a;pool=b").unwrap_err().contains("pool is named twice"));
        assert!(NodeShape::parse("gpu").unwrap_err().contains("not key=value"));
        assert!(NodeShape::parse("pool=a b").unwrap_err().contains("letters"));
        assert!(NodeShape::parse("labels=free").unwrap_err().contains("only value of labels"));
        assert!(NodeShape::parse("label.zone=a;label.zone=b").unwrap_err().contains("named once"));
        let many: Vec<String> = (0..40).map(|i| format!("r{i}=1")).collect();
        assert!(NodeShape::parse(&many.join(";")).unwrap_err().contains("at most 32"));
    }
}
