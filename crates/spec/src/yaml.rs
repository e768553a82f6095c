//! A YAML tree that remembers where every value was written, so an error can name the line.
//! Built from yaml-rust2's marked events. Anchors and aliases are refused: a scenario reads
//! top to bottom.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    Null,
    /// `plain` is false for quoted scalars, which are always strings.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub v: Yaml,
    pub line: usize,
}

impl Node {
    pub fn kind(&self) -> &'static str {
        match &self.v {
            Yaml::Null => "nothing",
            Yaml::Scalar { .. } => "a value",
            Yaml::Seq(_) => "a list",
            Yaml::Map(_) => "a mapping",
        }
    }
}

/// Where parsing stopped and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub message: String,
}

enum Frame {
    Seq(Vec<Node>, usize),
    Map(Vec<(Node, Node)>, Option<Node>, usize),
}

/// Deepest nesting of lists and mappings a file may have. Scenario files nest a handful of
/// levels; the bound keeps a hostile file from building a tree so deep that dropping it (a
/// recursive walk) overflows the stack.
pub const MAX_DEPTH: usize = 64;

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    docs: Vec<Node>,
    error: Option<SyntaxError>,
    /// Lists and mappings opened past `MAX_DEPTH`, not built; their ends are skipped too.
    skipped: usize,
}

impl Builder {
    fn push(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq(items, _)) => items.push(node),
            Some(Frame::Map(entries, key, _)) => match key.take() {
                None => *key = Some(node),
                Some(k) => {
                    let dup =
                        entries.iter().any(|(ek, _)| scalar_text(ek).is_some() && scalar_text(ek) == scalar_text(&k));
                    if dup && self.error.is_none() {
                        let name = scalar_text(&k).unwrap_or_default();
                        self.error =
                            Some(SyntaxError { line: k.line, message: format!("field `{name}` appears twice") });
                    }
                    entries.push((k, node));
                }
            },
        }
    }

    fn fail(&mut self, line: usize, message: &str) {
        if self.error.is_none() {
            self.error = Some(SyntaxError { line, message: message.to_string() });
        }
    }
}

fn scalar_text(n: &Node) -> Option<String> {
    match &n.v {
        Yaml::Scalar { text, .. } => Some(text.clone()),
        _ => None,
    }
}

impl Builder {
    /// True if the event is past the depth bound and must not be built.
    fn too_deep(&mut self, ev: &Event, line: usize) -> bool {
        match ev {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if self.skipped > 0 || self.stack.len() >= MAX_DEPTH {
                    self.fail(line, &format!("lists and mappings nest deeper than {MAX_DEPTH} levels"));
                    self.skipped += 1;
                    return true;
                }
                false
            }
            Event::SequenceEnd | Event::MappingEnd if self.skipped > 0 => {
                self.skipped -= 1;
                true
            }
            _ => self.skipped > 0,
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        if self.too_deep(&ev, line) {
            return;
        }
        match ev {
            Event::Scalar(text, style, anchor, _) => {
                if anchor != 0 {
                    self.fail(line, "anchors (&) are not supported in scenario files");
                }
                let plain = style == TScalarStyle::Plain;
                let v = if plain && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                    Yaml::Null
                } else {
                    Yaml::Scalar { text, plain }
                };
                self.push(Node { v, line });
            }
            Event::SequenceStart(anchor, _) => {
                if anchor != 0 {
                    self.fail(line, "anchors (&) are not supported in scenario files");
                }
                self.stack.push(Frame::Seq(Vec::new(), line));
            }
            Event::MappingStart(anchor, _) => {
                if anchor != 0 {
                    self.fail(line, "anchors (&) are not supported in scenario files");
                }
                self.stack.push(Frame::Map(Vec::new(), None, line));
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq(items, start)) = self.stack.pop() {
                    self.push(Node { v: Yaml::Seq(items), line: start });
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map(entries, _, start)) = self.stack.pop() {
                    self.push(Node { v: Yaml::Map(entries), line: start });
                }
            }
            Event::Alias(_) => self.fail(line, "aliases (*) are not supported in scenario files"),
            _ => {}
        }
    }
}

/// Parses one YAML document. An empty file is `None`.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut b = Builder::default();
    let mut parser = Parser::new_from_str(text);
    // Events are pulled one by one rather than through `Parser::load`, which recurses once
    // per nesting level and so overflows the stack on a deeply nested file before any
    // bound here could see it.
    loop {
        let (ev, mark) =
            parser.next_token().map_err(|e| SyntaxError { line: e.marker().line(), message: e.info().to_string() })?;
        if ev == Event::StreamEnd {
            break;
        }
        b.on_event(ev, mark);
        if b.skipped > 0 {
            // Past the depth bound: the error is recorded, nothing further is read.
            break;
        }
    }
    if let Some(e) = b.error {
        return Err(e);
    }
    if b.docs.len() > 1 {
        return Err(SyntaxError { line: b.docs[1].line, message: "a scenario file holds one YAML document".into() });
    }
    Ok(b.docs.pop())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_lines_and_styles() {
        let doc = parse("a: 1\nb:\n  - x\n  - 'y'\nc: ~\n").unwrap().unwrap();
        let Yaml::Map(entries) = doc.v else { panic!() };
        assert_eq!(entries[0].1, Node { v: Yaml::Scalar { text: "1".into(), plain: true }, line: 1 });
        let Yaml::Seq(items) = &entries[1].1.v else { panic!() };
        assert_eq!(items[1], Node { v: Yaml::Scalar { text: "y".into(), plain: false }, line: 4 });
        assert_eq!(entries[2].1.v, Yaml::Null);
    }

    #[test]
    fn refuses_duplicates_aliases_and_bad_syntax() {
        assert_eq!(parse("a: 1\na: 2\n").unwrap_err().line, 2);
        assert!(parse("a: &x 1\nb: *x\n").unwrap_err().message.contains("not supported"));
        assert!(parse("a: [1, 2\n").is_err());
    }
}
