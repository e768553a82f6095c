//! The leader's check of a membership change a follower forwards (`baton_raft`'s gate).

use baton_model::access::{Role, TokenHash};

/// What the leader asks of a membership change forwarded to it (`baton_raft`'s gate): the
/// raft port takes any replica certificate, so a follower's admin check alone would let one
/// replica's certificate change the membership. Once the cluster has tokens, the change must
/// carry a live admin token's hash, judged against this leader's applied state.
pub fn membership_gate(replica: baton_raft::Replica) -> baton_raft::MembershipGate {
    std::sync::Arc::new(move |change, authority| {
        replica.read_local(|s| {
            if !s.access().enforced() {
                return Ok(());
            }
            let what = format!("{change:?}");
            let Some(bytes) = authority else {
                return Err(format!(
                    "{what} was forwarded without the caller's token (by a replica of an older build, or \
                     forged); make it on the leader"
                ));
            };
            let hash: TokenHash =
                bytes.try_into().map_err(|_| format!("{what}: the forwarded token hash is not 32 bytes"))?;
            let token = s.access().authenticate(&hash).map_err(|e| format!("{what}: {e}"))?;
            match token.has(Role::Admin) {
                true => Ok(()),
                false => Err(format!("{what} needs role admin; user {} does not have it", token.spec.user)),
            }
        })
    })
}
