//! A connection after its handshake: keys of its own, and every frame sealed.
//!
//! Each side of a handshake makes a fresh X25519 key pair; the two public keys, both nonces and
//! both ends' addresses make the transcript that both proofs cover. The connection's keys come
//! from HKDF-SHA256 (RFC 5869) over the Diffie-Hellman result and the step's shared secret (none
//! under MUNGE, whose credentials cover the public keys instead), salted with the transcript's
//! hash: one key per direction. Every frame after the handshake is sealed with
//! ChaCha20-Poly1305 (RFC 8439) under its direction's key, its nonce the frame's number in that
//! direction, so a process between the two (a relay on a candidate port) sees no plaintext,
//! cannot change, drop, reorder or replay a frame without the receiver refusing it, and can only
//! pass the bytes on unchanged or cut the connection.

use super::wire::{self, WireError};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hkdf::Hkdf;
use serde::{de::DeserializeOwned, Serialize};
use sha2::{Digest, Sha256};
use std::net::TcpStream;
use std::time::Instant;
use x25519_dalek::{PublicKey, StaticSecret};

/// Bytes the AEAD adds to every frame (Poly1305's tag).
pub const TAG_BYTES: usize = 16;

/// One side's key pair for one connection (never reused).
pub struct KeyPair {
    secret: StaticSecret,
    public: PublicKey,
}

impl KeyPair {
    pub fn new() -> Result<KeyPair, String> {
        let mut b = [0u8; 32];
        getrandom::getrandom(&mut b)
            .map_err(|e| format!("no random numbers from the kernel: {e}"))?;
        let secret = StaticSecret::from(b);
        let public = PublicKey::from(&secret);
        Ok(KeyPair { secret, public })
    }

    /// The public key, hex (64 digits), as it goes on the wire.
    pub fn public_hex(&self) -> String {
        hex::encode(self.public.as_bytes())
    }
}

/// Which end of the connection this process is: decides which key sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Member,
}

/// A public key from the wire: 64 hex digits.
pub fn check_key(k: &str) -> Result<[u8; 32], String> {
    let b = hex::decode(k).map_err(|_| "public key is not hex".to_string())?;
    b.try_into()
        .map_err(|_| "public key is not 32 bytes".to_string())
}

/// The handshake's transcript: everything both proofs cover, hashed. Each part is length-prefixed
/// so that no two different transcripts hash the same bytes.
pub fn transcript(parts: &[&str]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(super::auth::PROTOCOL.as_bytes());
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().into()
}

/// The two directions' ciphers of one connection.
pub struct Keys {
    send: ChaCha20Poly1305,
    recv: ChaCha20Poly1305,
}

impl Keys {
    /// Keys from this side's pair, the other side's public key, the step's pre-shared key
    /// (empty under MUNGE) and the transcript hash.
    pub fn derive(
        mine: &KeyPair,
        theirs: &[u8; 32],
        psk: &[u8],
        transcript: &[u8; 32],
        role: Role,
    ) -> Result<Keys, String> {
        let shared = mine.secret.diffie_hellman(&PublicKey::from(*theirs));
        // A low-order point gives an all-zero result whatever our key: refuse it (RFC 7748 s6.1).
        if !shared.was_contributory() {
            return Err("the other side's public key is not usable (a low-order point)".into());
        }
        let mut ikm = Vec::with_capacity(32 + psk.len());
        ikm.extend_from_slice(shared.as_bytes());
        ikm.extend_from_slice(psk);
        let hk = Hkdf::<Sha256>::new(Some(transcript), &ikm);
        let mut to_member = [0u8; 32];
        let mut to_coordinator = [0u8; 32];
        hk.expand(b"nccl-check session: coordinator to member", &mut to_member)
            .and_then(|()| {
                hk.expand(
                    b"nccl-check session: member to coordinator",
                    &mut to_coordinator,
                )
            })
            .map_err(|_| "HKDF cannot make a 32-byte key".to_string())?;
        let (send, recv) = match role {
            Role::Coordinator => (to_member, to_coordinator),
            Role::Member => (to_coordinator, to_member),
        };
        Ok(Keys::from_raw(send, recv))
    }

    /// Keys given directly (the plane's unit tests, which run without a handshake).
    pub fn from_raw(send: [u8; 32], recv: [u8; 32]) -> Keys {
        Keys {
            send: ChaCha20Poly1305::new(Key::from_slice(&send)),
            recv: ChaCha20Poly1305::new(Key::from_slice(&recv)),
        }
    }
}

/// The nonce of frame `n` in one direction: 4 zero bytes and `n`, big-endian. Each direction has
/// its own key, so a counter alone never repeats a (key, nonce) pair.
fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    *Nonce::from_slice(&b)
}

/// An authenticated connection: frames sealed one way, opened the other, in order.
pub struct Session {
    stream: TcpStream,
    keys: Keys,
    sent: u64,
    received: u64,
    /// Who is at the other end, for messages ("the coordinator (n1:29617)").
    peer: String,
    /// Digests of the last frames opened, so that one sent again is named a replay.
    recent: std::collections::VecDeque<[u8; 32]>,
}

/// Frames remembered for [`WireError::Replayed`].
const RECENT_FRAMES: usize = 16;

impl Session {
    pub fn new(stream: TcpStream, keys: Keys) -> Session {
        Session {
            stream,
            keys,
            sent: 0,
            received: 0,
            peer: "the other process".into(),
            recent: Default::default(),
        }
    }

    /// Names the other end for messages.
    pub fn named(mut self, peer: String) -> Session {
        self.peer = peer;
        self
    }

    /// Who is at the other end.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The socket (for a second handle that can cut it off, or its addresses).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Seals and sends one message.
    pub fn send<T: Serialize>(&mut self, msg: &T, deadline: Instant) -> Result<(), WireError> {
        let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
        self.send_json(&body, deadline)
    }

    /// Seals and sends one message already serialized (`body`: its JSON), so that one message
    /// for many sessions is serialized once.
    pub fn send_json(&mut self, body: &[u8], deadline: Instant) -> Result<(), WireError> {
        let sealed_len =
            u32::try_from(body.len() + TAG_BYTES).map_err(|_| WireError::TooLarge {
                len: body.len(),
                max: u32::MAX as usize,
            })?;
        let n = self.sent;
        self.sent = n.checked_add(1).ok_or(WireError::Closed)?;
        let sealed = self
            .keys
            .send
            .encrypt(
                &nonce(n),
                Payload {
                    msg: body,
                    aad: &sealed_len.to_be_bytes(),
                },
            )
            .map_err(|_| WireError::Io("cannot seal a frame".into()))?;
        wire::send_frame(&mut self.stream, &sealed, deadline)
    }

    /// Receives, opens and parses one message of at most `max` bytes of plaintext. A frame that
    /// does not open (changed, dropped or reordered on the way) is [`WireError::Forged`]; one that
    /// opened before and comes again, [`WireError::Replayed`].
    pub fn recv<T: DeserializeOwned>(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<T, WireError> {
        let sealed = wire::recv_frame(&mut self.stream, max + TAG_BYTES, deadline)?;
        let n = self.received;
        let body = self
            .keys
            .recv
            .decrypt(
                &nonce(n),
                Payload {
                    msg: &sealed,
                    aad: &(sealed.len() as u32).to_be_bytes(),
                },
            )
            .map_err(|_| {
                // A frame that opened before fails now only because its number has passed.
                if self.recent.contains(&Sha256::digest(&sealed).into()) {
                    WireError::Replayed
                } else {
                    WireError::Forged
                }
            })?;
        if self.recent.len() == RECENT_FRAMES {
            self.recent.pop_front();
        }
        self.recent.push_back(Sha256::digest(&sealed).into());
        self.received = n.checked_add(1).ok_or(WireError::Closed)?;
        wire::decode(&body)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    /// Two ends of one loopback connection with matching keys.
    pub(crate) fn pair() -> (Session, Session) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        (
            Session::new(a, Keys::from_raw(k1, k2)),
            Session::new(b, Keys::from_raw(k2, k1)),
        )
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(2)
    }

    #[test]
    fn both_sides_derive_the_same_keys_and_a_third_key_pair_does_not() {
        let (c, m, x) = (
            KeyPair::new().unwrap(),
            KeyPair::new().unwrap(),
            KeyPair::new().unwrap(),
        );
        let t = transcript(&["a", "b"]);
        let kc = Keys::derive(&c, m.public.as_bytes(), b"psk", &t, Role::Coordinator).unwrap();
        let km = Keys::derive(&m, c.public.as_bytes(), b"psk", &t, Role::Member).unwrap();
        let probe = |k: &ChaCha20Poly1305| k.encrypt(&nonce(0), &b"x"[..]).unwrap();
        assert_eq!(probe(&kc.send), probe(&km.recv));
        assert_eq!(probe(&kc.recv), probe(&km.send));
        assert_ne!(probe(&kc.send), probe(&kc.recv), "one key per direction");
        // Another psk, another transcript, or a stranger's key pair: other keys.
        let other_psk = Keys::derive(&m, c.public.as_bytes(), b"psk2", &t, Role::Member).unwrap();
        let other_t = transcript(&["a", "c"]);
        let other_tr =
            Keys::derive(&m, c.public.as_bytes(), b"psk", &other_t, Role::Member).unwrap();
        let stranger = Keys::derive(&x, c.public.as_bytes(), b"psk", &t, Role::Member).unwrap();
        for k in [other_psk, other_tr, stranger] {
            assert_ne!(probe(&k.send), probe(&kc.recv));
        }
        // The all-zero public key (a low-order point) is refused.
        assert!(Keys::derive(&c, &[0u8; 32], b"", &t, Role::Coordinator).is_err());
    }

    #[test]
    fn transcript_parts_cannot_be_shifted_into_each_other() {
        assert_ne!(transcript(&["ab", "c"]), transcript(&["a", "bc"]));
    }

    #[test]
    fn sealed_frames_go_through_in_order_and_carry_no_plaintext() {
        let (mut a, mut b) = pair();
        a.send(&"the-unique-id", soon()).unwrap();
        a.send(&vec![1.5f64, 2.5], soon()).unwrap();
        let s: String = b.recv(100, soon()).unwrap();
        let v: Vec<f64> = b.recv(100, soon()).unwrap();
        assert_eq!((s.as_str(), v), ("the-unique-id", vec![1.5, 2.5]));
        b.send(&7u32, soon()).unwrap();
        assert_eq!(a.recv::<u32>(100, soon()).unwrap(), 7);
    }

    /// What a relay in the middle could do to the bytes: every change is refused.
    #[test]
    fn a_changed_or_dropped_frame_is_refused_as_forged_and_a_replay_as_replayed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        for attack in ["flip", "replay", "drop"] {
            let mut sender = Session::new(
                TcpStream::connect(addr).unwrap(),
                Keys::from_raw([3; 32], [4; 32]),
            );
            let (mut raw_in, _) = l.accept().unwrap();
            // Two frames, read raw from the socket as a relay would.
            sender.send(&vec![1.0f64], soon()).unwrap();
            sender.send(&vec![2.0f64], soon()).unwrap();
            let mut frames = Vec::new();
            for _ in 0..2 {
                let mut len = [0u8; 4];
                raw_in.read_exact(&mut len).unwrap();
                let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                raw_in.read_exact(&mut body).unwrap();
                frames.push((len, body));
            }
            // The relay passes them on to the real receiver, changed.
            let mut out = TcpStream::connect(addr).unwrap();
            let (inner, _) = l.accept().unwrap();
            let mut receiver = Session::new(inner, Keys::from_raw([4; 32], [3; 32]));
            let send = |o: &mut TcpStream, (len, body): &([u8; 4], Vec<u8>)| {
                o.write_all(len).unwrap();
                o.write_all(body).unwrap();
            };
            match attack {
                "flip" => {
                    let mut f = frames[0].clone();
                    f.1[2] ^= 1;
                    send(&mut out, &f);
                }
                "replay" => {
                    send(&mut out, &frames[0]);
                    send(&mut out, &frames[0]);
                    let _: Vec<f64> = receiver.recv(100, soon()).unwrap();
                }
                _ => send(&mut out, &frames[1]),
            }
            let r: Result<Vec<f64>, _> = receiver.recv(100, soon());
            let want = match attack {
                "replay" => WireError::Replayed,
                _ => WireError::Forged,
            };
            assert_eq!(r.unwrap_err(), want, "{attack}");
        }
    }
}
