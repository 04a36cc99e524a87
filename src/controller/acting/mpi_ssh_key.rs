//! The SSH key pair of an MPI gang, made as Kubeflow Trainer's MPI plugin makes it: ECDSA on
//! P-521, the private key as SEC1 PEM (`EC PRIVATE KEY`), the public key as one authorized_keys
//! line (`ecdsa-sha2-nistp521 AAAA...`, no comment), and the immutable `kubernetes.io/ssh-auth`
//! Secret `<trainjob>-mpi-ssh-auth` holding both, owned by the TrainJob. The key material never
//! leaves the Secret's body: no log, no error, no `Debug` shows it.

use base64ct::{Base64, Encoding};
use p521::elliptic_curve::rand_core::OsRng;
use p521::elliptic_curve::sec1::ToEncodedPoint;
use serde_json::{Value, json};

/// The Secret's data key of the private key (`corev1.SSHAuthPrivateKey`).
pub const PRIVATE_KEY: &str = "ssh-privatekey";
/// The Secret's data key of the public key.
pub const PUBLIC_KEY: &str = "ssh-publickey";

/// A fresh key pair: (private key PEM, authorized_keys line).
pub struct KeyPair {
    private_pem: String,
    public_line: String,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPair(<redacted>)")
    }
}

impl KeyPair {
    /// Generates a key from the operating system's randomness.
    pub fn generate() -> Result<KeyPair, String> {
        let secret = p521::SecretKey::random(&mut OsRng);
        let point = secret.public_key().to_encoded_point(false);
        let scalar = secret.to_bytes();
        let (Ok(scalar), Ok(point)) = (<&[u8; 66]>::try_from(&scalar[..]), <&[u8; 133]>::try_from(point.as_bytes()))
        else {
            return Err("the MPI SSH key is not a P-521 key".into());
        };
        Ok(KeyPair { private_pem: sec1_pem(scalar, point), public_line: authorized_key(point) })
    }

    /// The public half, as an authorized_keys line.
    pub fn public_line(&self) -> &str {
        &self.public_line
    }

    /// The Secret body: type `kubernetes.io/ssh-auth`, immutable, owned by the TrainJob.
    pub fn secret(&self, namespace: &str, name: &str, owner: &Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
            "type": "kubernetes.io/ssh-auth",
            "immutable": true,
            "stringData": {PRIVATE_KEY: self.private_pem, PUBLIC_KEY: self.public_line},
        })
    }
}

/// The RFC 5915 `ECPrivateKey` of a P-521 key, PEM: version 1, the scalar, the named curve
/// (secp521r1) and the public point, as Go's `x509.MarshalECPrivateKey` writes it. The curve must
/// be named: OpenSSH and OpenSSL refuse a key without it.
fn sec1_pem(scalar: &[u8; 66], point: &[u8; 133]) -> String {
    const SECP521R1: [u8; 7] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];
    let mut der = vec![0x30, 0x81, 0xdc, 0x02, 0x01, 0x01, 0x04, 0x42];
    der.extend_from_slice(scalar);
    der.extend_from_slice(&[0xa0, 0x07]);
    der.extend_from_slice(&SECP521R1);
    der.extend_from_slice(&[0xa1, 0x81, 0x89, 0x03, 0x81, 0x86, 0x00]);
    der.extend_from_slice(point);
    debug_assert_eq!(der.len(), 3 + 0xdc);
    let body = Base64::encode_string(&der);
    let mut pem = String::from("-----BEGIN EC PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END EC PRIVATE KEY-----\n");
    pem
}

/// OpenSSH's public-key line for an uncompressed P-521 point (RFC 5656: the key type, the curve
/// name and the point, each as a length-prefixed string).
fn authorized_key(point: &[u8]) -> String {
    let mut blob = Vec::with_capacity(4 + 19 + 4 + 8 + 4 + point.len());
    for part in [b"ecdsa-sha2-nistp521".as_slice(), b"nistp521", point] {
        blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
        blob.extend_from_slice(part);
    }
    format!("ecdsa-sha2-nistp521 {}\n", Base64::encode_string(&blob))
}

/// Whether an existing Secret is the one trainyard made for the TrainJob of `uid`: a controller
/// owner reference to it.
pub fn made_for(secret: &Value, uid: &str) -> bool {
    secret
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid && r["kind"] == "TrainJob" && r["controller"] == true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_sec1_p521_and_its_public_line_is_openssh() {
        let pair = KeyPair::generate().unwrap();
        assert!(
            pair.private_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
            "SEC1 block, as Go's MarshalECPrivateKey"
        );
        let line = pair.public_line();
        let b64 = line.strip_prefix("ecdsa-sha2-nistp521 ").and_then(|l| l.strip_suffix('\n')).unwrap();
        let blob = Base64::decode_vec(b64).unwrap();
        // type (4+19), curve (4+8), point (4+133: 0x04 || X || Y).
        assert_eq!(blob.len(), 4 + 19 + 4 + 8 + 4 + 133);
        assert_eq!(&blob[4..23], b"ecdsa-sha2-nistp521");
        assert_eq!(blob[4 + 19 + 4 + 8 + 4], 0x04, "uncompressed point");
        let secret = p521::SecretKey::from_sec1_pem(&pair.private_pem).unwrap();
        let point = secret.public_key().to_encoded_point(false);
        assert_eq!(&blob[blob.len() - 133..], point.as_bytes(), "the public line is the private key's");
    }

    #[test]
    fn openssh_reads_the_key_where_it_is_installed() {
        let pair = KeyPair::generate().unwrap();
        let path = std::env::temp_dir().join(format!("trainyard-ssh-key-test-{}", std::process::id()));
        std::fs::write(&path, &pair.private_pem).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let out = std::process::Command::new("ssh-keygen").arg("-y").arg("-f").arg(&path).output();
        std::fs::remove_file(&path).ok();
        // Where OpenSSH is not installed there is nothing to ask; the end-to-end suite asks too.
        let Ok(out) = out else { return };
        assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pair.public_line().trim());
    }

    #[test]
    fn two_keys_differ_and_debug_shows_neither() {
        let (a, b) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        assert_ne!(a.public_line(), b.public_line());
        assert_eq!(format!("{a:?}"), "KeyPair(<redacted>)");
    }

    #[test]
    fn the_secret_is_owned_immutable_ssh_auth() {
        let owner = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "j", "uid": "u", "controller": true, "blockOwnerDeletion": true});
        let s = KeyPair::generate().unwrap().secret("team", "j-mpi-ssh-auth", &owner);
        assert_eq!(s["type"], "kubernetes.io/ssh-auth");
        assert_eq!(s["immutable"], true);
        assert!(made_for(&s, "u"));
        assert!(!made_for(&s, "other"));
        assert!(!made_for(&json!({"metadata": {}}), "u"));
    }
}
