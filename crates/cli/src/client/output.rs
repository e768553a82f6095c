//! `-o table|json|yaml`: tables with aligned columns for people, the message as data for
//! scripts (see `data`).

use clap::ValueEnum;
use serde_json::Value;
use yaml_rust2::{Yaml, YamlEmitter};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
}

/// The message as data in `format` (json or yaml); `None` for table, which the caller draws.
pub fn data_text(format: Format, value: &Value) -> Option<String> {
    match format {
        Format::Table => None,
        Format::Json => Some(format!("{}\n", serde_json::to_string_pretty(value).expect("a Value always serializes"))),
        Format::Yaml => Some(yaml_text(value)),
    }
}

pub fn yaml_text(value: &Value) -> String {
    let mut s = String::new();
    YamlEmitter::new(&mut s).dump(&to_yaml(value)).expect("writing to a String cannot fail");
    // The emitter starts documents with `---` and ends without a newline.
    let body = s.strip_prefix("---\n").or_else(|| s.strip_prefix("---")).unwrap_or(&s);
    format!("{}\n", body.trim_start_matches(' '))
}

fn to_yaml(v: &Value) -> Yaml {
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(a) => Yaml::Array(a.iter().map(to_yaml).collect()),
        Value::Object(m) => Yaml::Hash(m.iter().map(|(k, v)| (Yaml::String(k.clone()), to_yaml(v))).collect()),
    }
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table { header: header.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i + 1 == cells.len() {
                    line.push_str(c);
                } else {
                    line.push_str(&format!("{c:<w$}  "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["NAME", "STATE"]);
        t.row(vec!["train-long-name".into(), "Running".into()]);
        t.row(vec!["a".into(), "Pending".into()]);
        assert_eq!(t.render(), "NAME             STATE\ntrain-long-name  Running\na                Pending\n");
    }

    #[test]
    fn yaml_reads_back_as_the_same_data() {
        let v = serde_json::json!({"name": "a: b", "n": 3, "list": [1, 2], "empty": {}, "none": null, "yes": "true"});
        let text = yaml_text(&v);
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
        assert_eq!(docs[0]["name"].as_str(), Some("a: b"));
        assert_eq!(docs[0]["yes"].as_str(), Some("true"));
        assert_eq!(docs[0]["n"].as_i64(), Some(3));
        assert!(docs[0]["none"].is_null());
    }
}
