//! The scrape endpoint replicas and agents serve: `GET /metrics` and nothing else
//! (docs/metrics.md), on the HTTP listener of [`crate::http`]: mutual TLS under TLS (any
//! certificate of the cluster's CA; Prometheus is given a client certificate), plain HTTP
//! under `--insecure` and on a `--metrics-plain-listen` listener the operator asks for.

use std::sync::Arc;

use hyper::{Method, Response, StatusCode};
use tokio::net::TcpListener;

use crate::http::{self, Body, Call};
use crate::tls::{ANY_ROLE, Transport};

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `render()` on `GET /metrics` until `closing` turns true.
pub async fn serve(
    transport: Transport,
    listener: TcpListener,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    closing: tokio::sync::watch::Receiver<bool>,
) {
    let handler = move |call: Call, _| {
        let render = render.clone();
        async move { answer(&call, || render()) }
    };
    http::serve(transport, listener, ANY_ROLE, handler, closing).await;
}

/// `GET /metrics` rendered; anything else refused, saying what is served.
pub fn answer(call: &Call, render: impl FnOnce() -> String) -> Response<Body> {
    if call.method != Method::GET {
        return http::text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here");
    }
    // A query string (`?name[]=...`) is accepted and ignored.
    match call.path.as_str() {
        "/metrics" => http::reply(StatusCode::OK, CONTENT_TYPE, render()),
        _ => http::text(StatusCode::NOT_FOUND, "only /metrics is served here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(answer(&Call::new(Method::GET, "/metrics"), || "up 1".into()).status(), StatusCode::OK);
        assert_eq!(answer(&Call::new(Method::GET, "/metrics?x=1"), || "up 1".into()).status(), StatusCode::OK);
        assert_eq!(answer(&Call::new(Method::GET, "/"), String::new).status(), StatusCode::NOT_FOUND);
        let post = Call::new(Method::POST, "/metrics");
        assert_eq!(answer(&post, String::new).status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
