//! The one thing the server reads from a verified client certificate: its subject's
//! common name (RFC 5280 §4.1.2.6), found by walking the DER (X.690) just far enough.
//! rustls has verified the certificate already; this only names it for the logs and
//! the connection's record. Any structure it does not expect yields `None`.

/// A DER element: its tag and contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // Long form: the low bits count the length bytes (at most 4 here).
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const VERSION: u8 = 0xa0;
/// id-at-commonName, 2.5.4.3.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The subject's first common name of the DER certificate `cert`.
pub(crate) fn subject_common_name(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(cert)? else {
        return None;
    };
    let mut fields = tbs;
    // [0] version, serialNumber, signature, issuer, validity come before the subject.
    let (tag, _, rest) = element(fields)?;
    if tag == VERSION {
        fields = rest;
    }
    for _ in 0..4 {
        fields = element(fields)?.2;
    }
    let (SEQUENCE, mut rdns, _) = element(fields)? else {
        return None;
    };
    while !rdns.is_empty() {
        let (tag, rdn, rest) = element(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        let mut attrs = rdn;
        while !attrs.is_empty() {
            let (_, attr, rest) = element(attrs)?;
            attrs = rest;
            let (OID, oid, value) = element(attr)? else {
                return None;
            };
            if oid == COMMON_NAME {
                // UTF8String, PrintableString, IA5String, ...: the bytes as text.
                let (_, text, _) = element(value)?;
                return Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_name_of_a_generated_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["client.example".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "txnfs tests");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(subject_common_name(cert.der()).as_deref(), Some("alice"));
    }

    #[test]
    fn no_common_name_or_garbage_is_none() {
        let mut params = rcgen::CertificateParams::new(vec!["client.example".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(subject_common_name(cert.der()), None);
        assert_eq!(subject_common_name(&[]), None);
        assert_eq!(subject_common_name(&[0x30, 0x82, 0xff]), None);
        assert_eq!(subject_common_name(&cert.der()[..40]), None);
    }
}
