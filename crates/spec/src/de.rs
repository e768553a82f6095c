//! Typed reading of the YAML tree, with errors that name the file, the line and the field
//! (`timeline[3].submit.resources.gpu`). Unknown fields are errors, listing what is allowed.

use std::collections::BTreeMap;
use std::fmt;

use baton_model::name::Name;
use baton_model::quantity::{parse_gpu_request, parse_quantity, parse_thousandths};
use baton_model::resources::{GPU, GPU_FRACTION, Resources, validate_resource_name};

use crate::yaml::{Node, Yaml};

/// Bad input: where it is and what is wrong. Nothing is simulated then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub file: String,
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}:{}: field {}: {}", self.file, self.line, self.field, self.message)
        }
    }
}

impl std::error::Error for InputError {}

/// Reading context: the file name for errors.
#[derive(Clone, Copy)]
pub struct Cx<'f> {
    pub file: &'f str,
}

pub type R<T> = Result<T, InputError>;

impl<'f> Cx<'f> {
    pub fn err(&self, line: usize, field: &str, message: impl Into<String>) -> InputError {
        InputError { file: self.file.to_string(), line, field: field.to_string(), message: message.into() }
    }

    pub fn map<'n>(&self, node: &'n Node, path: &str) -> R<Fields<'n, 'f>> {
        let Yaml::Map(entries) = &node.v else {
            return Err(self.err(node.line, path, format!("expected a mapping, found {}", node.kind())));
        };
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let key = self.text(k, path)?;
            out.push((key, k.line, v));
        }
        Ok(Fields { cx: *self, path: path.to_string(), line: node.line, entries: out, used: Vec::new() })
    }

    pub fn seq<'n>(&self, node: &'n Node, path: &str) -> R<&'n [Node]> {
        match &node.v {
            Yaml::Seq(items) => Ok(items),
            _ => Err(self.err(node.line, path, format!("expected a list, found {}", node.kind()))),
        }
    }

    /// A scalar as text (numbers too).
    pub fn text(&self, node: &Node, path: &str) -> R<String> {
        match &node.v {
            Yaml::Scalar { text, .. } => Ok(text.clone()),
            _ => Err(self.err(node.line, path, format!("expected a value, found {}", node.kind()))),
        }
    }

    pub fn name(&self, node: &Node, path: &str) -> R<Name> {
        let t = self.text(node, path)?;
        Name::new(t).map_err(|e| self.err(node.line, path, e.to_string()))
    }

    pub fn names(&self, node: &Node, path: &str) -> R<Vec<Name>> {
        let items = self.seq(node, path)?;
        items.iter().enumerate().map(|(i, n)| self.name(n, &format!("{path}[{i}]"))).collect()
    }

    pub fn int(&self, node: &Node, path: &str) -> R<i64> {
        let t = self.text(node, path)?;
        t.trim().parse::<i64>().map_err(|_| self.err(node.line, path, format!("expected a whole number, found {t:?}")))
    }

    pub fn count(&self, node: &Node, path: &str) -> R<u32> {
        let v = self.int(node, path)?;
        if v < 0 {
            return Err(self.err(node.line, path, format!("{v} is negative; expected a whole number >= 0")));
        }
        u32::try_from(v).map_err(|_| self.err(node.line, path, format!("{v} is too large")))
    }

    pub fn number(&self, node: &Node, path: &str) -> R<f64> {
        let t = self.text(node, path)?;
        match t.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(self.err(node.line, path, format!("expected a number, found {t:?}"))),
        }
    }

    /// Seconds (decimals allowed) as milliseconds; never negative.
    pub fn seconds(&self, node: &Node, path: &str) -> R<u64> {
        let v = self.number(node, path)?;
        if v < 0.0 {
            return Err(self.err(node.line, path, format!("{v} is negative; expected seconds >= 0")));
        }
        if v > 1e12 {
            return Err(self.err(node.line, path, format!("{v} seconds is too large")));
        }
        Ok((v * 1000.0).round() as u64)
    }

    pub fn boolean(&self, node: &Node, path: &str) -> R<bool> {
        match self.text(node, path)?.as_str() {
            "true" | "True" | "yes" => Ok(true),
            "false" | "False" | "no" => Ok(false),
            t => Err(self.err(node.line, path, format!("expected true or false, found {t:?}"))),
        }
    }

    /// A quantity of `resource`, in its smallest unit (CPUs in thousandths).
    pub fn quantity(&self, node: &Node, path: &str, resource: &str) -> R<u64> {
        let t = self.text(node, path)?;
        parse_quantity(resource, &t).map_err(|e| self.err(node.line, path, e.to_string()))
    }

    /// What one replica asks: resources, where `gpu` may also be a fraction of one shared
    /// GPU (`gpu: 0.5` or `500m`; decisions.md section 11).
    pub fn request(&self, node: &Node, path: &str) -> R<Resources> {
        self.with_gpu_milli(node, path, parse_gpu_request)
    }

    /// Amounts held or expected, where `gpu` may be any number of thousandths (`1.5`: three
    /// replicas of half a shared GPU).
    pub fn amounts(&self, node: &Node, path: &str) -> R<Resources> {
        self.with_gpu_milli(node, path, |t| parse_thousandths(GPU, t))
    }

    /// Resources with `gpu` read in thousandths by `gpu_milli`; the fraction's own name is
    /// never written (it is what `gpu: 0.5` becomes).
    fn with_gpu_milli(
        &self,
        node: &Node,
        path: &str,
        gpu_milli: impl Fn(&str) -> Result<u64, baton_model::quantity::QuantityError>,
    ) -> R<Resources> {
        let mut f = self.map(node, path)?;
        let mut r = Resources::new();
        for (key, line, value) in f.take_all() {
            let p = format!("{path}.{key}");
            if key == GPU_FRACTION {
                return Err(self.err(line, &p, format!("{GPU_FRACTION} is not written: ask gpu: 0.5 or gpu: 500m")));
            }
            validate_resource_name(&key).map_err(|e| self.err(line, &p, e.to_string()))?;
            if key == GPU {
                let t = self.text(value, &p)?;
                r.set_gpus_milli(gpu_milli(&t).map_err(|e| self.err(value.line, &p, e.to_string()))?);
            } else {
                r.set(&key, self.quantity(value, &p, &key)?);
            }
        }
        Ok(r)
    }

    /// `{gpu: 8, cpu: 64, memory: 512Gi}`.
    pub fn resources(&self, node: &Node, path: &str) -> R<Resources> {
        let mut f = self.map(node, path)?;
        let mut r = Resources::new();
        for (key, line, value) in f.take_all() {
            let p = format!("{path}.{key}");
            validate_resource_name(&key).map_err(|e| self.err(line, &p, e.to_string()))?;
            r.set(&key, self.quantity(value, &p, &key)?);
        }
        Ok(r)
    }

    /// A per-resource limit map; resources it does not name are unlimited.
    pub fn limits(&self, node: &Node, path: &str) -> R<BTreeMap<String, u64>> {
        let mut f = self.map(node, path)?;
        let mut m = BTreeMap::new();
        for (key, line, value) in f.take_all() {
            let p = format!("{path}.{key}");
            validate_resource_name(&key).map_err(|e| self.err(line, &p, e.to_string()))?;
            let amount = self.quantity(value, &p, &key)?;
            m.insert(key, amount);
        }
        Ok(m)
    }
}

/// The fields of one mapping. `finish` refuses any field nobody asked for.
pub struct Fields<'n, 'f> {
    cx: Cx<'f>,
    pub path: String,
    pub line: usize,
    entries: Vec<(String, usize, &'n Node)>,
    used: Vec<&'static str>,
}

impl<'n> Fields<'n, '_> {
    pub fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    /// An optional field; a null value counts as absent.
    pub fn opt(&mut self, key: &'static str) -> Option<&'n Node> {
        self.used.push(key);
        self.entries.iter().find(|(k, _, _)| k == key).map(|(_, _, v)| *v).filter(|v| v.v != Yaml::Null)
    }

    pub fn req(&mut self, key: &'static str) -> R<&'n Node> {
        let line = self.line;
        let path = self.field_path(key);
        self.opt(key).ok_or_else(|| self.cx.err(line, &path, "is required"))
    }

    /// Every entry, for maps whose keys are data (resources, job names).
    pub fn take_all(&mut self) -> Vec<(String, usize, &'n Node)> {
        std::mem::take(&mut self.entries)
    }

    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _, _)| k == key)
    }

    pub fn finish(self) -> R<()> {
        if let Some((k, line, _)) = self.entries.iter().find(|(k, _, _)| !self.used.contains(&k.as_str())) {
            let mut allowed: Vec<&str> = self.used.clone();
            allowed.sort_unstable();
            allowed.dedup();
            return Err(self.cx.err(
                *line,
                &self.field_path(k),
                format!("unknown field (expected one of: {})", allowed.join(", ")),
            ));
        }
        Ok(())
    }
}
