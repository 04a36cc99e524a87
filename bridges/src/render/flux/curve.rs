//! The ZeroMQ CURVE certificate Flux brokers of one TrainJob share: a key pair derived from the
//! TrainJob's uid (so that every render of it gives the same Secret), in ZeroMQ's text form.

use sha2::{Digest, Sha256};

/// Z85's alphabet (ZeroMQ RFC 32): 85 printable characters, none of them a quote or backslash.
const Z85: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Z85-encodes `bytes`, whose length must be a multiple of 4 (CURVE keys are 32 bytes).
pub fn z85(bytes: &[u8]) -> String {
    debug_assert!(bytes.len().is_multiple_of(4), "Z85 encodes whole 4-byte frames");
    let mut out = String::with_capacity(bytes.len() / 4 * 5);
    for frame in bytes.chunks_exact(4) {
        let mut value = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let mut digits = [0u8; 5];
        for digit in digits.iter_mut().rev() {
            *digit = Z85[(value % 85) as usize];
            value /= 85;
        }
        out.extend(digits.iter().map(|&d| d as char));
    }
    out
}

/// The CURVE key pair of a TrainJob: the secret key is SHA-256 of its uid, as Trainer derives it,
/// the public key that secret's X25519 product with the base point.
pub fn key_pair(uid: &str) -> ([u8; 32], [u8; 32]) {
    let secret: [u8; 32] = Sha256::digest(uid.as_bytes()).into();
    let public = x25519_dalek::x25519(secret, x25519_dalek::X25519_BASEPOINT_BYTES);
    (public, secret)
}

/// The `curve.cert` file: ZeroMQ's ZPL certificate format, named after the TrainJob.
pub fn certificate(job_name: &str, uid: &str) -> String {
    let (public, secret) = key_pair(uid);
    format!(
        "#   ZeroMQ CURVE Secret Certificate\n#   Made by trainyard for TrainJob {job_name}; keep it private.\n\n\
         metadata\n    name = \"{job_name}\"\ncurve\n    public-key = \"{}\"\n    secret-key = \"{}\"\n",
        z85(&public),
        z85(&secret)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
    }

    #[test]
    fn z85_matches_the_rfc_example() {
        assert_eq!(z85(&[0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]), "HelloWorld");
    }

    #[test]
    fn x25519_matches_rfc_7748() {
        // RFC 7748 section 6.1, Alice's pair.
        let secret: [u8; 32] =
            hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a").try_into().expect("32");
        let public = x25519_dalek::x25519(secret, x25519_dalek::X25519_BASEPOINT_BYTES);
        assert_eq!(public.to_vec(), hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"));
    }

    #[test]
    fn the_pair_follows_the_uid_alone() {
        assert_eq!(key_pair("uid-1"), key_pair("uid-1"));
        assert_ne!(key_pair("uid-1").0, key_pair("uid-2").0);
        let (public, secret) = key_pair("uid-1");
        assert_eq!(x25519_dalek::x25519(secret, x25519_dalek::X25519_BASEPOINT_BYTES), public);
    }

    #[test]
    fn the_certificate_names_the_job_and_carries_40_character_keys() {
        let cert = certificate("tune", "uid-1");
        assert!(cert.contains("    name = \"tune\"\n"), "{cert}");
        for key in ["public-key", "secret-key"] {
            let line = cert.lines().find(|l| l.trim_start().starts_with(key)).expect(key);
            let value = line.split('"').nth(1).expect("quoted");
            assert_eq!(value.len(), 40, "{line}");
            assert!(value.bytes().all(|b| Z85.contains(&b)), "{line}");
        }
    }
}
