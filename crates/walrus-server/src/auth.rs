//! SCRAM-SHA-256 password authentication (RFC 5802 / RFC 7677), as PostgreSQL 10+ does
//! it: the server keeps only a verifier (salt, iteration count, StoredKey, ServerKey),
//! never the password, and both sides prove knowledge of the password without sending
//! it. Channel binding is not offered (walrus refuses SSL), so clients send `n,,`.
//!
//! The verifier is configured with `password` in walrus.toml: either PostgreSQL's stored
//! form `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (what
//! `pg_authid.rolpassword` holds, so a PostgreSQL verifier can be reused) or a plain
//! password, from which a verifier with a random salt is derived at startup.

use std::io::{self, Read, Write};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::protocol::{read_message_upto, Out, Reader, PRE_AUTH_MESSAGE_BYTES_MAX};

type HmacSha256 = Hmac<Sha256>;

/// PostgreSQL's default iteration count (`scram_iterations`).
const ITERATIONS: u32 = 4096;
const MECHANISM: &str = "SCRAM-SHA-256";

/// What the server stores to check a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramVerifier {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

impl ScramVerifier {
    /// Derives a verifier for `password` with `salt` (RFC 5802 §3).
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted);
        let client_key = hmac(&salted, b"Client Key");
        ScramVerifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// A verifier from the `password` setting: PostgreSQL's stored form, or a plain
    /// password (salted randomly).
    pub fn from_setting(value: &str) -> Result<ScramVerifier, String> {
        if value.starts_with("SCRAM-SHA-256$") {
            return ScramVerifier::parse(value)
                .ok_or_else(|| "password: malformed SCRAM-SHA-256 verifier".to_string());
        }
        if value.is_empty() {
            return Err("password: must not be empty".into());
        }
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        Ok(ScramVerifier::derive(value, &salt, ITERATIONS))
    }

    /// Parses `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>` (base64 fields).
    pub fn parse(s: &str) -> Option<ScramVerifier> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (iter_salt, keys) = rest.split_once('$')?;
        let (iter, salt) = iter_salt.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        Some(ScramVerifier {
            iterations: iter.parse().ok().filter(|&i| i > 0)?,
            salt: B64.decode(salt).ok()?,
            stored_key: B64.decode(stored).ok()?.try_into().ok()?,
            server_key: B64.decode(server).ok()?.try_into().ok()?,
        })
    }
}

/// Why authentication did not succeed.
#[derive(Debug)]
pub enum AuthError {
    /// Wrong password or a malformed exchange: 28P01 to the client.
    Failed(&'static str),
    Io(io::Error),
}

impl From<crate::protocol::MessageError> for AuthError {
    /// A malformed SASL message: the exchange fails (08P01 is no use before login).
    fn from(e: crate::protocol::MessageError) -> Self {
        AuthError::Io(e.into())
    }
}

impl From<io::Error> for AuthError {
    fn from(e: io::Error) -> Self {
        AuthError::Io(e)
    }
}

/// Runs the SASL exchange on `stream`. On success the final server message has been
/// written and AuthenticationOk is the caller's to send.
pub fn scram_exchange<S: Read + Write>(stream: &mut S, v: &ScramVerifier) -> Result<(), AuthError> {
    let mut out = Out::default();
    out.auth_sasl(&[MECHANISM]);
    stream.write_all(&out.buf)?;
    out.buf.clear();

    // SASLInitialResponse: mechanism, then the client-first-message.
    let m = read_message_upto(stream, PRE_AUTH_MESSAGE_BYTES_MAX)?;
    if m.kind != b'p' {
        return Err(AuthError::Failed("expected a SASL response"));
    }
    let mut r = Reader::new(&m.body);
    if r.cstr()? != MECHANISM {
        return Err(AuthError::Failed(
            "client selected an invalid SASL authentication mechanism",
        ));
    }
    let len = r.i32()?;
    if len < 0 {
        return Err(AuthError::Failed("malformed SCRAM message"));
    }
    let client_first = std::str::from_utf8(r.bytes(len as usize)?)
        .map_err(|_| AuthError::Failed("malformed SCRAM message"))?
        .to_string();
    // gs2 header: "n,," (no channel binding) or "y,," (client supports it, we do not).
    let bare = client_first
        .strip_prefix("n,,")
        .or_else(|| client_first.strip_prefix("y,,"))
        .ok_or(AuthError::Failed("unsupported SCRAM channel binding"))?;
    let client_nonce = bare
        .split(',')
        .find_map(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or(AuthError::Failed("malformed SCRAM message (no nonce)"))?;
    let mut server_nonce = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut server_nonce);
    let nonce = format!("{client_nonce}{}", B64.encode(server_nonce));
    let server_first = format!("r={nonce},s={},i={}", B64.encode(&v.salt), v.iterations);
    out.auth_sasl_continue(server_first.as_bytes());
    stream.write_all(&out.buf)?;
    out.buf.clear();

    // SASLResponse: client-final-message "c=<gs2 b64>,r=<nonce>,p=<proof>".
    let m = read_message_upto(stream, PRE_AUTH_MESSAGE_BYTES_MAX)?;
    if m.kind != b'p' {
        return Err(AuthError::Failed("expected a SASL response"));
    }
    let client_final =
        std::str::from_utf8(&m.body).map_err(|_| AuthError::Failed("malformed SCRAM message"))?;
    let (without_proof, proof) = client_final
        .rsplit_once(",p=")
        .ok_or(AuthError::Failed("malformed SCRAM message (no proof)"))?;
    if !without_proof.split(',').any(|a| a == format!("r={nonce}")) {
        return Err(AuthError::Failed("SCRAM nonce mismatch"));
    }
    let proof: [u8; 32] = B64
        .decode(proof)
        .ok()
        .and_then(|p| p.try_into().ok())
        .ok_or(AuthError::Failed("malformed SCRAM proof"))?;
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let client_signature = hmac(&v.stored_key, auth_message.as_bytes());
    let mut client_key = [0u8; 32];
    for i in 0..32 {
        client_key[i] = proof[i] ^ client_signature[i];
    }
    let computed: [u8; 32] = Sha256::digest(client_key).into();
    // Constant-time comparison: do not leak how many bytes matched.
    let diff = computed
        .iter()
        .zip(&v.stored_key)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return Err(AuthError::Failed("password authentication failed"));
    }
    let server_signature = hmac(&v.server_key, auth_message.as_bytes());
    out.auth_sasl_final(format!("v={}", B64.encode(server_signature)).as_bytes());
    stream.write_all(&out.buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_round_trips_postgres_stored_form() {
        let v = ScramVerifier::derive("pencil", b"0123456789abcdef", 4096);
        let text = format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            v.iterations,
            B64.encode(&v.salt),
            B64.encode(v.stored_key),
            B64.encode(v.server_key)
        );
        assert_eq!(ScramVerifier::parse(&text), Some(v.clone()));
        assert_eq!(ScramVerifier::from_setting(&text), Ok(v));
        assert!(ScramVerifier::parse("SCRAM-SHA-256$x:y$z").is_none());
        assert!(ScramVerifier::from_setting("").is_err());
    }

    /// RFC 7677 §3's example exchange, checked through the key derivation.
    #[test]
    fn rfc7677_test_vector() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = ScramVerifier::derive("pencil", &salt, 4096);
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = hmac(&v.server_key, auth_message.as_bytes());
        assert_eq!(
            B64.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let client_signature = hmac(&v.stored_key, auth_message.as_bytes());
        let proof = B64
            .decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        let client_key: Vec<u8> = proof
            .iter()
            .zip(client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        assert_eq!(<[u8; 32]>::from(Sha256::digest(&client_key)), v.stored_key);
    }
}
