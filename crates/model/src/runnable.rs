//! What a job asks an agent to exec: its command and environment. Checked at submit so that
//! a job an agent could not start (or must not) is refused with a clear error instead of
//! being placed, refused by the agent, and holding its GPUs.

use std::collections::BTreeMap;

use crate::error::ApplyError;
use crate::limits::{MAX_ARG_LEN, MAX_COMMAND_ARGS, MAX_COMMAND_BYTES, MAX_ENV_BYTES, MAX_ENV_VAR_LEN, MAX_ENV_VARS};

/// Variables that make the dynamic loader run code of the caller's choosing inside every
/// process of the job, before `main`, including helpers it may exec. `LD_LIBRARY_PATH` is
/// deliberately not here: CUDA and framework installs legitimately point it at their
/// libraries, and it only changes where libraries are searched (the loader ignores it for
/// setuid programs), while these inject code outright.
const REFUSED_ENV: [&str; 2] = ["LD_PRELOAD", "LD_AUDIT"];

/// Variables the agent sets for every replica (its GPUs, its rank, where to checkpoint), over
/// whatever the job asked for: a job setting one would be silently overridden, so it is told.
const AGENT_ENV: &str = "CUDA_VISIBLE_DEVICES";
const AGENT_ENV_PREFIX: &str = "BATON_";

pub fn validate_command(command: &[String]) -> Result<(), ApplyError> {
    if command.len() > MAX_COMMAND_ARGS {
        return Err(ApplyError::invalid("command", format!("{} arguments; at most {MAX_COMMAND_ARGS}", command.len())));
    }
    let mut total = 0;
    for (i, arg) in command.iter().enumerate() {
        let field = format!("command[{i}]");
        if i == 0 && arg.is_empty() {
            return Err(ApplyError::invalid(field, "the program to run may not be empty"));
        }
        if arg.len() > MAX_ARG_LEN {
            return Err(ApplyError::invalid(field, format!("{} bytes; at most {MAX_ARG_LEN}", arg.len())));
        }
        if arg.contains('\0') {
            return Err(ApplyError::invalid(field, "holds a NUL byte, which no exec can pass"));
        }
        total += arg.len();
    }
    if total > MAX_COMMAND_BYTES {
        return Err(ApplyError::invalid("command", format!("{total} bytes in all; at most {MAX_COMMAND_BYTES}")));
    }
    Ok(())
}

pub fn validate_env(env: &BTreeMap<String, String>) -> Result<(), ApplyError> {
    if env.len() > MAX_ENV_VARS {
        return Err(ApplyError::invalid("env", format!("{} variables; at most {MAX_ENV_VARS}", env.len())));
    }
    let mut total = 0;
    for (key, value) in env {
        validate_env_key(key)?;
        let field = format!("env[{key}]");
        // `KEY=value` as the process receives it.
        let len = key.len() + 1 + value.len();
        if len > MAX_ENV_VAR_LEN {
            return Err(ApplyError::invalid(field, format!("{len} bytes; at most {MAX_ENV_VAR_LEN}")));
        }
        if value.contains('\0') {
            return Err(ApplyError::invalid(field, "the value holds a NUL byte, which no exec can pass"));
        }
        total += len;
    }
    if total > MAX_ENV_BYTES {
        return Err(ApplyError::invalid("env", format!("{total} bytes in all; at most {MAX_ENV_BYTES}")));
    }
    Ok(())
}

/// A key the shell and `execve` both take: `[A-Za-z_][A-Za-z0-9_]*`, and not a loader hook.
fn validate_env_key(key: &str) -> Result<(), ApplyError> {
    let mut chars = key.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(ApplyError::invalid(format!("env[{key:?}]"), "a variable name must match [A-Za-z_][A-Za-z0-9_]*"));
    }
    if key == AGENT_ENV || key.starts_with(AGENT_ENV_PREFIX) {
        return Err(ApplyError::invalid(
            format!("env[{key}]"),
            format!("the agent sets {AGENT_ENV} and {AGENT_ENV_PREFIX}* for each replica; choose another name"),
        ));
    }
    if REFUSED_ENV.iter().any(|r| r.eq_ignore_ascii_case(key)) {
        return Err(ApplyError::invalid(
            format!("env[{key}]"),
            format!("{key} injects code into every process of the job ({} are refused)", REFUSED_ENV.join(", ")),
        ));
    }
    Ok(())
}
