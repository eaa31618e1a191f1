//! Certificates for the RPC-with-TLS tests, made at run time: a CA, a server
//! certificate for 127.0.0.1 and `localhost` signed by it, and client certificates
//! whose subject common name is the client's identity. Written as PEM files into a
//! directory the test owns.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A certificate authority that signs the other certificates of one test.
pub struct TestCa {
    key: KeyPair,
    cert: rcgen::Certificate,
    /// The CA's certificate (PEM).
    pub cert_pem: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

impl TestCa {
    /// A new CA named `name`, its certificate written to `dir/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let cert_pem = write(dir, &format!("{name}-ca.pem"), &cert.pem());
        TestCa {
            key,
            cert,
            cert_pem,
        }
    }

    fn issue(&self, dir: &Path, file: &str, names: Vec<String>, cn: &str) -> CertFiles {
        let mut params = CertificateParams::new(names).expect("certificate params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed certificate");
        CertFiles {
            cert: write(dir, &format!("{file}.pem"), &cert.pem()),
            key: write(dir, &format!("{file}-key.pem"), &key.serialize_pem()),
        }
    }

    /// A server certificate for 127.0.0.1, ::1 and `localhost`.
    pub fn server(&self, dir: &Path, file: &str) -> CertFiles {
        let names = vec!["127.0.0.1".into(), "::1".into(), "localhost".into()];
        self.issue(dir, file, names, "txnfs test server")
    }

    /// A client certificate whose subject common name is `cn`.
    pub fn client(&self, dir: &Path, file: &str, cn: &str) -> CertFiles {
        self.issue(dir, file, vec![format!("{cn}.clients.test")], cn)
    }
}
