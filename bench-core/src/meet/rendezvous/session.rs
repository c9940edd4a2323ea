//! The Noise handshake of one connection, and every frame after it sealed.
//!
//! The handshake is the Noise framework's `NNpsk0` pattern ([`NOISE`], through `snow`): the
//! member opens (`-> psk, e`), the coordinator answers (`<- e, ee`). Both sides hold the step's
//! pre-shared key ([`super::auth::noise_psk`]: from the shared secret, or under MUNGE from the
//! job's ticket), and the prologue names the protocol and the step, so only a holder of that
//! step's key can make or read either message; each side's ephemeral key makes the connection's
//! keys its own, and each message's payload (the connection's two addresses as that side sees
//! them) is covered. Noise leaves one thing to the application: the member's opening, made with
//! the key, can be played again by whoever recorded it, and the coordinator cannot tell before
//! the member's first sealed frame, which only the holder of the opening's ephemeral key can
//! make. So the coordinator takes nothing from a member before that frame (its hello) opens.
//!
//! Every frame after the handshake is sealed under its direction's key, its nonce the piece's
//! number in that direction, so a process between the two (a relay on a candidate port) sees no
//! plaintext, cannot change, drop, reorder or replay a frame without the receiver refusing it,
//! and can only pass the bytes on unchanged or cut the connection.

use super::wire::{self, WireError};
use serde::{de::DeserializeOwned, Serialize};
use sha2::{Digest, Sha256};
use std::net::TcpStream;
use std::time::Instant;

/// The Noise protocol of every connection: no static keys (each process is a fresh one),
/// authenticated by the step's pre-shared key alone.
pub const NOISE: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";

/// Bytes ChaCha20-Poly1305 adds to every Noise message (its tag).
const TAG_BYTES: usize = 16;
/// Largest Noise message (the framework's limit).
const NOISE_MAX: usize = 65535;
/// Plaintext bytes of one sealed piece: a frame longer than this is sealed as several pieces,
/// each with its own nonce, and a first byte that says whether it is the frame's last piece
/// (so that a frame cut at a piece's end does not open as a shorter message).
const PIECE: usize = NOISE_MAX - TAG_BYTES - 1;

/// One side of a connection's handshake in progress.
pub struct Handshake(snow::HandshakeState);

impl Handshake {
    /// The member's side (it speaks first), or the coordinator's, for the step `label` under
    /// its pre-shared key.
    pub fn new(psk: &[u8; 32], label: &str, member: bool) -> Result<Handshake, String> {
        let params = NOISE.parse().map_err(|e| format!("{NOISE}: {e}"))?;
        let prologue = [super::auth::PROTOCOL.as_bytes(), b"\0", label.as_bytes()].concat();
        let builder = snow::Builder::new(params)
            .prologue(&prologue)
            .and_then(|b| b.psk(0, psk))
            .map_err(|e| format!("{NOISE}: {e}"))?;
        let state = if member {
            builder.build_initiator()
        } else {
            builder.build_responder()
        };
        state.map(Handshake).map_err(|e| format!("{NOISE}: {e}"))
    }

    /// This side's next handshake message, carrying `payload`, hex (as it goes in JSON).
    pub fn write<T: Serialize>(&mut self, payload: &T) -> Result<String, String> {
        let body = serde_json::to_vec(payload).map_err(|e| e.to_string())?;
        let mut msg = vec![0u8; NOISE_MAX];
        let n = self
            .0
            .write_message(&body, &mut msg)
            .map_err(|e| format!("cannot write the handshake: {e}"))?;
        Ok(hex::encode(&msg[..n]))
    }

    /// The other side's handshake message `hex`, and its payload; an error where it was not
    /// made with this step's key (or for another handshake).
    pub fn read<T: DeserializeOwned>(&mut self, hex: &str) -> Result<T, String> {
        let msg = hex::decode(hex).map_err(|_| "handshake message is not hex".to_string())?;
        let mut body = vec![0u8; msg.len()];
        let n = self
            .0
            .read_message(&msg, &mut body)
            .map_err(|e| format!("its handshake does not open with this step's key ({e})"))?;
        wire::decode(&body[..n]).map_err(|e| e.to_string())
    }

    /// The connection's keys, once both messages went through.
    pub fn done(self) -> Result<snow::StatelessTransportState, String> {
        self.0
            .into_stateless_transport_mode()
            .map_err(|e| format!("the handshake is not finished: {e}"))
    }
}

/// An authenticated connection: frames sealed one way, opened the other, in order.
pub struct Session {
    stream: TcpStream,
    noise: snow::StatelessTransportState,
    /// Pieces sealed and opened so far: the next nonce each way.
    sent: u64,
    received: u64,
    /// Who is at the other end, for messages ("the coordinator (n1:29617)").
    peer: String,
    /// Digests of the last frames opened, so that one sent again is named a replay.
    recent: std::collections::VecDeque<[u8; 32]>,
}

/// Frames remembered for [`WireError::Replayed`].
const RECENT_FRAMES: usize = 16;

/// Bytes on the wire of a frame of `len` bytes of plaintext.
fn sealed_len(len: usize) -> usize {
    len + len.div_ceil(PIECE).max(1) * (1 + TAG_BYTES)
}

impl Session {
    pub fn new(stream: TcpStream, noise: snow::StatelessTransportState) -> Session {
        Session {
            stream,
            noise,
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
        let mut sealed = vec![0u8; sealed_len(body.len())];
        let (mut at, mut piece) = (0, vec![0u8; body.len().min(PIECE) + 1]);
        let pieces: Vec<&[u8]> = match body.len() {
            0 => vec![&[]],
            _ => body.chunks(PIECE).collect(),
        };
        for (i, chunk) in pieces.iter().enumerate() {
            piece[0] = u8::from(i + 1 == pieces.len());
            piece[1..=chunk.len()].copy_from_slice(chunk);
            let n = self.sent;
            self.sent = n.checked_add(1).ok_or(WireError::Closed)?;
            at += self
                .noise
                .write_message(n, &piece[..=chunk.len()], &mut sealed[at..])
                .map_err(|e| WireError::Io(format!("cannot seal a frame: {e}")))?;
        }
        wire::send_frame(&mut self.stream, &sealed[..at], deadline)
    }

    /// Receives, opens and parses one message of at most `max` bytes of plaintext. A frame that
    /// does not open (changed, dropped or reordered on the way) is [`WireError::Forged`]; one that
    /// opened before and comes again, [`WireError::Replayed`].
    pub fn recv<T: DeserializeOwned>(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<T, WireError> {
        let sealed = wire::recv_frame(&mut self.stream, sealed_len(max), deadline)?;
        let digest: [u8; 32] = Sha256::digest(&sealed).into();
        let body = self.open(&sealed).map_err(|e| {
            // A frame that opened before fails now only because its number has passed.
            match self.recent.contains(&digest) {
                true => WireError::Replayed,
                false => e,
            }
        })?;
        if self.recent.len() == RECENT_FRAMES {
            self.recent.pop_front();
        }
        self.recent.push_back(digest);
        wire::decode(&body)
    }

    /// The plaintext of one frame's pieces, each opened under the next nonce; the last, and only
    /// the last, marked so.
    fn open(&mut self, sealed: &[u8]) -> Result<Vec<u8>, WireError> {
        let mut body = Vec::with_capacity(sealed.len());
        let mut piece = vec![0u8; sealed.len().min(NOISE_MAX)];
        let mut n = self.received;
        let mut pieces = sealed.chunks(NOISE_MAX).peekable();
        while let Some(p) = pieces.next() {
            let len = self
                .noise
                .read_message(n, p, &mut piece)
                .map_err(|_| WireError::Forged)?;
            n = n.checked_add(1).ok_or(WireError::Closed)?;
            let last = pieces.peek().is_none();
            if len == 0 || piece[0] != u8::from(last) {
                return Err(WireError::Forged);
            }
            body.extend_from_slice(&piece[1..len]);
        }
        if n == self.received {
            return Err(WireError::Forged);
        }
        self.received = n;
        Ok(body)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    /// A handshake run in memory: the member's and the coordinator's keys, or why it failed.
    pub(crate) fn keys(
        member_psk: &[u8; 32],
        coordinator_psk: &[u8; 32],
    ) -> Result<(snow::StatelessTransportState, snow::StatelessTransportState), String> {
        let mut m = Handshake::new(member_psk, "slurm-7.0", true)?;
        let mut c = Handshake::new(coordinator_psk, "slurm-7.0", false)?;
        let opening = m.write(&"member")?;
        let _: String = c.read(&opening)?;
        let greeting = c.write(&"coordinator")?;
        let _: String = m.read(&greeting)?;
        Ok((m.done()?, c.done()?))
    }

    /// Two ends of one loopback connection with matching keys.
    pub(crate) fn pair() -> (Session, Session) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let (m, c) = keys(&[1; 32], &[1; 32]).unwrap();
        (Session::new(a, m), Session::new(b, c))
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(2)
    }

    #[test]
    fn only_a_holder_of_the_steps_key_and_label_completes_a_handshake() {
        assert!(keys(&[1; 32], &[1; 32]).is_ok());
        // A member without the key: the coordinator cannot read its opening.
        let e = keys(&[2; 32], &[1; 32]).unwrap_err();
        assert!(e.contains("does not open"), "{e}");
        // Another step's coordinator under the same key: the prologues differ.
        let mut m = Handshake::new(&[1; 32], "slurm-7.0", true).unwrap();
        let mut c = Handshake::new(&[1; 32], "slurm-7.1", false).unwrap();
        assert!(c.read::<String>(&m.write(&"member").unwrap()).is_err());
        // A coordinator without the key cannot answer in a way the member reads: a squatter
        // that replays a real coordinator's greeting to another opening is refused too.
        let mut m = Handshake::new(&[1; 32], "slurm-7.0", true).unwrap();
        let mut c = Handshake::new(&[1; 32], "slurm-7.0", false).unwrap();
        let _: String = c.read(&m.write(&"member").unwrap()).unwrap();
        let greeting = c.write(&"coordinator").unwrap();
        let mut other = Handshake::new(&[1; 32], "slurm-7.0", true).unwrap();
        other.write(&"member").unwrap();
        assert!(other.read::<String>(&greeting).is_err());
    }

    /// Noise's psk0 opening can be played again (the framework says so); what it cannot give
    /// the one who plays it is a session: the coordinator's answer opens only with the
    /// opening's ephemeral key, and the recorded member's sealed hello does not open under the
    /// new connection's keys.
    #[test]
    fn a_recorded_opening_played_again_gets_no_session() {
        let mut m = Handshake::new(&[1; 32], "slurm-7.0", true).unwrap();
        let opening = m.write(&"member").unwrap();
        let mut c1 = Handshake::new(&[1; 32], "slurm-7.0", false).unwrap();
        let _: String = c1.read(&opening).unwrap();
        let greeting = c1.write(&"coordinator").unwrap();
        let _: String = m.read(&greeting).unwrap();
        let m = m.done().unwrap();
        let mut hello = vec![0u8; 64];
        let n = m.write_message(0, b"\x01hello", &mut hello).unwrap();
        // The recording, played to the coordinator again: it answers, and refuses the hello.
        let mut c2 = Handshake::new(&[1; 32], "slurm-7.0", false).unwrap();
        let _: String = c2.read(&opening).unwrap();
        c2.write(&"coordinator").unwrap();
        let c2 = c2.done().unwrap();
        let mut out = vec![0u8; 64];
        assert!(c2.read_message(0, &hello[..n], &mut out).is_err());
        let c1 = c1.done().unwrap();
        assert!(c1.read_message(0, &hello[..n], &mut out).is_ok());
    }

    #[test]
    fn sealed_frames_go_through_in_order_whatever_their_size_and_carry_no_plaintext() {
        let (mut a, mut b) = pair();
        a.send(&"the-unique-id", soon()).unwrap();
        a.send(&vec![1.5f64, 2.5], soon()).unwrap();
        let s: String = b.recv(100, soon()).unwrap();
        let v: Vec<f64> = b.recv(100, soon()).unwrap();
        assert_eq!((s.as_str(), v), ("the-unique-id", vec![1.5, 2.5]));
        b.send(&7u32, soon()).unwrap();
        assert_eq!(a.recv::<u32>(100, soon()).unwrap(), 7);
        // Over one Noise message (65,535 bytes): sealed in pieces, whole at the other end.
        let big = "x".repeat(3 * PIECE + 7);
        let writer = std::thread::spawn(move || {
            a.send(&big, soon()).unwrap();
            a
        });
        let got: String = b.recv(4 * PIECE, soon()).unwrap();
        assert_eq!(got.len(), 3 * PIECE + 7);
        let mut a = writer.join().unwrap();
        a.send(&1u8, soon()).unwrap();
        assert_eq!(b.recv::<u8>(10, soon()).unwrap(), 1);
    }

    /// What a relay in the middle could do to the bytes: every change is refused.
    #[test]
    fn a_changed_dropped_or_cut_frame_is_refused_as_forged_and_a_replay_as_replayed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        for attack in ["flip", "replay", "drop", "cut"] {
            let (m, c) = keys(&[3; 32], &[3; 32]).unwrap();
            let mut sender = Session::new(TcpStream::connect(addr).unwrap(), m);
            let (mut raw_in, _) = l.accept().unwrap();
            // Two frames, the second of two pieces, read raw from the socket as a relay would.
            sender.send(&vec![1.0f64], soon()).unwrap();
            let big = "y".repeat(PIECE + 10);
            let reader = std::thread::spawn(move || {
                let mut frames = Vec::new();
                for _ in 0..2 {
                    let mut len = [0u8; 4];
                    raw_in.read_exact(&mut len).unwrap();
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    raw_in.read_exact(&mut body).unwrap();
                    frames.push(body);
                }
                frames
            });
            sender.send(&big, soon()).unwrap();
            let frames = reader.join().unwrap();
            // The relay passes them on to the real receiver, changed.
            let mut out = TcpStream::connect(addr).unwrap();
            let (inner, _) = l.accept().unwrap();
            let mut receiver = Session::new(inner, c);
            let send = |o: &mut TcpStream, body: &[u8]| {
                o.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
                o.write_all(body).unwrap();
            };
            let writer = std::thread::spawn(move || {
                match attack {
                    "flip" => {
                        let mut f = frames[0].clone();
                        f[2] ^= 1;
                        send(&mut out, &f);
                    }
                    "replay" => {
                        send(&mut out, &frames[0]);
                        send(&mut out, &frames[0]);
                    }
                    "cut" => {
                        send(&mut out, &frames[0]);
                        send(&mut out, &frames[1][..NOISE_MAX]);
                    }
                    _ => send(&mut out, &frames[1]),
                }
                out
            });
            if attack == "replay" || attack == "cut" {
                let _: Vec<f64> = receiver.recv(100, soon()).unwrap();
            }
            let r: Result<String, _> = receiver.recv(2 * PIECE, soon());
            let want = match attack {
                "replay" => WireError::Replayed,
                _ => WireError::Forged,
            };
            assert_eq!(r.unwrap_err(), want, "{attack}");
            drop(writer.join().unwrap());
        }
    }
}
