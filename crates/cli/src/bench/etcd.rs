//! A minimal etcd v3 client for one call, `KV.Put`, so that `baton bench submit --etcd`
//! drives etcd with exactly the same client concurrency and payloads as baton.
//!
//! Only the fields the benchmark sets are declared; prost skips the rest of the reply.

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// `etcdserverpb.PutRequest` (rpc.proto of etcd 3.4): key = 1, value = 2.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `etcdserverpb.PutResponse`: its header (and previous value) are not needed here.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {}

const PUT_PATH: &str = "/etcdserverpb.KV/Put";

/// One client connection to an etcd member.
pub struct EtcdKv {
    grpc: tonic::client::Grpc<Channel>,
}

impl EtcdKv {
    pub fn new(channel: Channel) -> EtcdKv {
        EtcdKv { grpc: tonic::client::Grpc::new(channel) }
    }

    /// A put, acknowledged by etcd once committed by a quorum (etcd's own durability rule).
    pub async fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), tonic::Status> {
        self.grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("etcd not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<PutRequest, PutResponse>::default();
        let path = PathAndQuery::from_static(PUT_PATH);
        self.grpc.unary(tonic::Request::new(PutRequest { key, value }), path, codec).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_put_encodes_key_and_value_with_etcds_field_numbers() {
        let bytes = PutRequest { key: b"k".to_vec(), value: b"v".to_vec() }.encode_to_vec();
        // Field 1 (key) and field 2 (value), both length-delimited.
        assert_eq!(bytes, vec![0x0a, 1, b'k', 0x12, 1, b'v']);
    }
}
