//! `baton sim FILE... [-o text|json] [--check]`.

use std::process::ExitCode;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args)]
pub struct SimArgs {
    /// Scenario files (spec/scenario.md).
    #[arg(required = true)]
    files: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    output: Format,
    /// Check each file's `expect:` blocks; exit non-zero naming each one that failed.
    #[arg(long)]
    check: bool,
}

pub fn run(args: SimArgs) -> ExitCode {
    let mut ok = true;
    for file in &args.files {
        ok &= run_file(file, &args);
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn run_file(file: &str, args: &SimArgs) -> bool {
    let text = match baton_sim::files::read_text(std::path::Path::new(file)) {
        Ok((_, t)) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    let outcome = match baton_sim::run(file, &text) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    match args.output {
        Format::Json => match serde_json::to_string_pretty(&outcome.report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return false;
            }
        },
        Format::Text => print!("{}", baton_sim::output::text(&outcome.report)),
    }
    if !args.check {
        return true;
    }
    for f in &outcome.failures {
        eprintln!("FAIL {file}: {f}");
    }
    if outcome.failures.is_empty() {
        eprintln!("ok {file}: {} expectations hold", outcome.checked);
        true
    } else {
        eprintln!("FAILED {file}: {} of {} expectations failed", outcome.failures.len(), outcome.checked);
        false
    }
}
