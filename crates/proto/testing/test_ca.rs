//! A certificate authority for tests, shared by the agent's and the server's TLS tests
//! (included with `#[path]`): it makes `--tls-dir` directories with rcgen the way `baton tls`
//! does (OU = role, CN = name, the role's DNS name), so a test can also make certificates
//! `baton tls` never would, such as another cluster's.

use std::path::{Path, PathBuf};

use baton_proto::tls::{AGENT_HOST, REPLICA_HOST, Transport};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

pub struct Ca {
    name: String,
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { name: name.replace(' ', "-"), pem, issuer: Issuer::new(params, key) }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// `dir` with ca.pem, cert.pem and key.pem for (`role`, `name`).
    pub fn issue(&self, dir: &Path, role: &str, name: &str) -> PathBuf {
        let host = match role {
            "replica" => vec![REPLICA_HOST.to_string()],
            "agent" => vec![AGENT_HOST.to_string()],
            _ => Vec::new(),
        };
        let mut params = CertificateParams::new(host).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationalUnitName, role);
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let out = dir.join(format!("{}-{role}-{name}", self.name));
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("ca.pem"), &self.pem).unwrap();
        std::fs::write(out.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(out.join("key.pem"), key.serialize_pem()).unwrap();
        out
    }

    /// The transport of a process holding (`role`, `name`)'s certificate.
    pub fn transport(&self, dir: &Path, role: &str, name: &str) -> Transport {
        Transport::load(&self.issue(dir, role, name)).unwrap()
    }
}
