//! A replica's id from the command line: a number, or `from-hostname` for a Kubernetes
//! StatefulSet, whose pods are named NAME-0, NAME-1, ... and whose image has no shell to
//! compute an id with. Ids start at 1 because 0 means "no leader" to clients.

/// The largest ordinal taken from a host name; a StatefulSet of replicas is 3 or 5 pods.
const ORDINAL_MAX: u64 = 1_000;

/// Parses `--id`: `N` (N >= 1) or `from-hostname` (the host name's trailing ordinal + 1).
pub fn parse_replica_id(text: &str) -> Result<u64, String> {
    if text == "from-hostname" {
        return id_from_host_name(&host_name()?);
    }
    match text.parse::<u64>() {
        Ok(0) => Err("0 is not a replica id: ids start at 1".into()),
        Ok(id) => Ok(id),
        Err(_) => Err(format!("{text:?} is neither a replica id (1, 2, ...) nor `from-hostname`")),
    }
}

/// `baton-server-2` is replica 3: the ordinal after the last `-`, plus one.
pub fn id_from_host_name(host: &str) -> Result<u64, String> {
    let ordinal =
        host.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()).filter(|n| *n <= ORDINAL_MAX).ok_or_else(
            || format!("host name {host:?} does not end in -ORDINAL (0..={ORDINAL_MAX}), as a StatefulSet pod's does"),
        )?;
    Ok(ordinal + 1)
}

fn host_name() -> Result<String, String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .map_err(|e| format!("cannot read this machine's host name: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_pod_name_gives_its_ordinal_plus_one() {
        assert_eq!(id_from_host_name("baton-server-0"), Ok(1));
        assert_eq!(id_from_host_name("baton-server-4"), Ok(5));
    }

    #[test]
    fn a_host_name_without_an_ordinal_is_refused_by_name() {
        for host in ["sched", "sched-", "sched-x", "sched-1001"] {
            let err = id_from_host_name(host).unwrap_err();
            assert!(err.contains(&format!("{host:?}")), "{err}");
        }
    }

    #[test]
    fn ids_are_numbers_from_one() {
        assert_eq!(parse_replica_id("3"), Ok(3));
        assert!(parse_replica_id("0").unwrap_err().contains("start at 1"));
        assert!(parse_replica_id("three").unwrap_err().contains("from-hostname"));
    }
}
