//! Logging and shutdown for the long-running subcommands (server, agent, dev).

/// The environment variable that picks the log format: `text` (the default) or `json`.
pub const LOG_FORMAT_VAR: &str = "BATON_LOG_FORMAT";

/// The environment variable that, set to `1`, logs each span as it closes with its fields:
/// the steps of job decision paths (docs/metrics.md, "Tracing").
pub const LOG_SPANS_VAR: &str = "BATON_LOG_SPANS";

/// Whether BATON_LOG_SPANS asks for span lines; a value other than `0` or `1` is an error.
pub fn spans_from_env() -> Result<bool, String> {
    match std::env::var(LOG_SPANS_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(v) if v == "0" || v.is_empty() => Ok(false),
        Ok(v) if v == "1" => Ok(true),
        Ok(v) => Err(format!("{LOG_SPANS_VAR}={v:?}: set it to 1 to log spans, or 0")),
        Err(e) => Err(format!("{LOG_SPANS_VAR}: {e}")),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event; colours only on a terminal.
    Text,
    /// One JSON object per line (timestamp, level, target, fields, the spans it is in), for a
    /// log collector.
    Json,
}

impl LogFormat {
    /// Reads BATON_LOG_FORMAT; an unknown value is an error naming the variable and the choices.
    pub fn from_env() -> Result<LogFormat, String> {
        match std::env::var(LOG_FORMAT_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(LogFormat::Text),
            Ok(v) if v == "text" || v.is_empty() => Ok(LogFormat::Text),
            Ok(v) if v == "json" => Ok(LogFormat::Json),
            Ok(v) => Err(format!("{LOG_FORMAT_VAR}={v:?}: the log format is `text` or `json`")),
            Err(e) => Err(format!("{LOG_FORMAT_VAR}: {e}")),
        }
    }
}

/// Logs to stderr in the format BATON_LOG_FORMAT names; `RUST_LOG` filters (default: baton at
/// info, openraft's chatter at warn). Colours only on a terminal, so log files stay plain text.
/// With `export`, baton's INFO spans also go to an OTLP collector (crate::otel) for as long
/// as the returned pipeline lives.
pub fn init(export: Option<&crate::otel::Export>) -> Result<Option<crate::otel::Pipeline>, String> {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer;
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let format = LogFormat::from_env()?;
    let spans = if spans_from_env()? { FmtSpan::CLOSE } else { FmtSpan::NONE };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let Some(export) = export else {
        // Without export, one global filter: callsites it disables are never asked again.
        let builder =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_span_events(spans);
        // A second init (tests calling commands in one process) keeps the first subscriber.
        let _ = match format {
            LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
            LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).try_init(),
        };
        return Ok(None);
    };
    let pipeline = crate::otel::Pipeline::start(export)?;
    // Only baton's own spans (the decision path's, docs/metrics.md) are exported, whatever
    // RUST_LOG lets the logs show: the libraries' spans are many per request.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(pipeline.tracer())
        .with_filter(tracing_subscriber::filter::Targets::new().with_target("baton", tracing::Level::INFO));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_span_events(spans);
    let fmt = match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => fmt.json().with_current_span(true).with_span_list(true).boxed(),
    };
    let _ = tracing_subscriber::registry().with(fmt.with_filter(filter)).with(otel).try_init();
    Ok(Some(pipeline))
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
