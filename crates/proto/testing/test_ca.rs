//! A certificate authority for tests, shared by the agent's and the server's TLS tests
//! (included with `#[path]`): it makes `--tls-dir` directories with rcgen the way `baton tls`
//! does (OU = role, CN = name, the role's DNS name), so a test can also make certificates
//! `baton tls` never would, such as another cluster's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use baton_proto::tls::{AGENT_HOST, REPLICA_HOST, Transport};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, RevokedCertParams, SerialNumber, date_time_ymd,
};

/// The file in each issued directory naming its certificate's serial, for [`Ca::crl`].
pub const SERIAL_FILE: &str = "serial";

pub struct Ca {
    name: String,
    pem: String,
    issuer: Issuer<'static, KeyPair>,
    next_serial: AtomicU64,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { name: name.replace(' ', "-"), pem, issuer: Issuer::new(params, key), next_serial: AtomicU64::new(1) }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// `dir` with ca.pem, cert.pem and key.pem for (`role`, `name`).
    pub fn issue(&self, dir: &Path, role: &str, name: &str) -> PathBuf {
        self.issue_into(dir, role, name, "")
    }

    /// As [`Ca::issue`], into a directory whose name ends with `suffix` (a second
    /// certificate for the same holder).
    pub fn issue_into(&self, dir: &Path, role: &str, name: &str, suffix: &str) -> PathBuf {
        self.issue_with(dir, role, name, suffix, None)
    }

    /// An agent's certificate that fixes its node's shape (`uri`: `baton-shape:...`), into
    /// a directory whose name ends with `suffix`.
    pub fn issue_shaped(&self, dir: &Path, name: &str, suffix: &str, uri: &str) -> PathBuf {
        self.issue_with(dir, "agent", name, suffix, Some(uri))
    }

    fn issue_with(&self, dir: &Path, role: &str, name: &str, suffix: &str, uri: Option<&str>) -> PathBuf {
        let host = match role {
            "replica" => vec![REPLICA_HOST.to_string()],
            "agent" => vec![AGENT_HOST.to_string()],
            _ => Vec::new(),
        };
        let mut params = CertificateParams::new(host).unwrap();
        if let Some(uri) = uri {
            params.subject_alt_names.push(rcgen::SanType::URI(uri.to_string().try_into().unwrap()));
        }
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationalUnitName, role);
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let serial = self.next_serial.fetch_add(1, Ordering::Relaxed);
        params.serial_number = Some(SerialNumber::from(serial));
        // Each certificate expires in a year of its own, so that a test can tell which one
        // is in force from its expiry.
        params.not_after = rcgen::date_time_ymd(2040 + serial as i32, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let out = dir.join(format!("{}-{role}-{name}{suffix}", self.name));
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("ca.pem"), &self.pem).unwrap();
        std::fs::write(out.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(out.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(out.join(SERIAL_FILE), serial.to_string()).unwrap();
        out
    }

    /// A CRL (PEM) of this CA revoking the certificates in `dirs` (made by [`Ca::issue`]).
    pub fn crl(&self, dirs: &[&Path]) -> String {
        let revoked_certs = dirs
            .iter()
            .map(|d| {
                let serial: u64 = std::fs::read_to_string(d.join(SERIAL_FILE)).unwrap().trim().parse().unwrap();
                RevokedCertParams {
                    serial_number: SerialNumber::from(serial),
                    revocation_time: date_time_ymd(2024, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                }
            })
            .collect();
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2024, 1, 1),
            next_update: date_time_ymd(2100, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        params.signed_by(&self.issuer).unwrap().pem().unwrap()
    }

    /// The transport of a process holding (`role`, `name`)'s certificate.
    pub fn transport(&self, dir: &Path, role: &str, name: &str) -> Transport {
        Transport::load(&self.issue(dir, role, name)).unwrap()
    }
}

/// The first certificate of a PEM text, as DER.
pub fn der_of(pem: &str) -> Vec<u8> {
    baton_proto::tls::first_cert_der(pem).unwrap()
}
