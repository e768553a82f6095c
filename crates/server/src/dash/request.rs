//! One HTTP/1.1 request head, as the dashboard's listener reads it: the method, the path,
//! the query's pairs and the bearer token. Nothing else of HTTP is needed here.

/// Query pairs kept per request; the dashboard's endpoints take one or two.
pub const MAX_QUERY_PAIRS: usize = 8;

#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    /// The token of an `Authorization: Bearer TOKEN` header, if any.
    pub bearer: Option<String>,
}

impl Request {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The request in `head`, or why it is not one this listener reads.
pub fn parse(head: &str) -> Result<Request, &'static str> {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("not an HTTP/1 request line");
    };
    if !version.starts_with("HTTP/1") {
        return Err("not an HTTP/1 request line");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .take(MAX_QUERY_PAIRS)
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    let bearer = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.trim().to_string());
    Ok(Request { method: method.to_string(), path: path.to_string(), query, bearer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_path_query_and_authorization_are_read() {
        let r =
            parse("GET /api/jobs?after=7&limit=2 HTTP/1.1\r\nHost: x\r\nauthorization: Bearer abc\r\n\r\n").unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/api/jobs"));
        assert_eq!((r.param("after"), r.param("limit"), r.param("x")), (Some("7"), Some("2"), None));
        assert_eq!(r.bearer.as_deref(), Some("Bearer abc"));
        let r = parse("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.bearer), ("/", None));
        assert!(parse("hello").is_err());
        assert!(parse("GET / SPDY/3\r\n\r\n").is_err());
    }

    #[test]
    fn query_pairs_are_bounded() {
        let many: Vec<String> = (0..100).map(|i| format!("k{i}=v")).collect();
        let r = parse(&format!("GET /?{} HTTP/1.1\r\n\r\n", many.join("&"))).unwrap();
        assert_eq!(r.query.len(), MAX_QUERY_PAIRS);
    }
}
