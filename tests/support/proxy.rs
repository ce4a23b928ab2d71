//! A TCP proxy between a test and the PostgreSQL server that counts the messages the
//! client sends, by protocol tag (`E` Execute, `P` Parse, `S` Sync, `Q` simple Query...).
//! It proves how many statements and round trips a call costs, independent of server
//! statistics (which are reported late) and of extensions (pg_stat_statements may be
//! absent).
//!
//! It can also be frozen ([`CountingProxy::freeze`]): every packet to or from its port is
//! dropped by the kernel, without a FIN or RST, as a network path that goes silent
//! does. (A proxy that merely stopped forwarding would still have its kernel acknowledge
//! everything, which no timeout of a client's TCP stack can tell from a slow server.)

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::harness::server;

/// Counts per message tag, shared with the pump threads.
type Counts = Arc<Vec<AtomicU64>>;

pub struct CountingProxy {
    pub port: u16,
    counts: Counts,
    stop: Arc<AtomicBool>,
    /// Every socket opened, so Drop can shut them and release the pump threads.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    /// The pump threads, joined on Drop.
    pumps: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl CountingProxy {
    /// A proxy to the test server on a free local port.
    pub fn start() -> CountingProxy {
        let upstream = server();
        assert!(
            !upstream.host.starts_with('/'),
            "the counting proxy needs a TCP test server, not a Unix socket"
        );
        let upstream_addr = format!("{}:{}", upstream.host, upstream.port);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().unwrap().port();
        let counts: Counts = Arc::new((0..256).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let pumps = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (counts, stop, sockets, pumps) =
                (counts.clone(), stop.clone(), sockets.clone(), pumps.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let client = match listener.accept() {
                        Ok((client, _)) => client,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        Err(e) => panic!("proxy accept: {e}"),
                    };
                    client.set_nonblocking(false).unwrap();
                    let upstream = TcpStream::connect(&upstream_addr).expect("proxy upstream");
                    client.set_nodelay(true).unwrap();
                    upstream.set_nodelay(true).unwrap();
                    {
                        let mut all = sockets.lock().unwrap();
                        all.push(client.try_clone().unwrap());
                        all.push(upstream.try_clone().unwrap());
                    }
                    let (c_read, c_write) = (client.try_clone().unwrap(), client);
                    let (u_read, u_write) = (upstream.try_clone().unwrap(), upstream);
                    let counts = counts.clone();
                    let up = std::thread::spawn(move || pump_counting(c_read, u_write, &counts));
                    let down = std::thread::spawn(move || pump(u_read, c_write));
                    pumps.lock().unwrap().extend([up, down]);
                }
            })
        };
        CountingProxy {
            port,
            counts,
            stop,
            sockets,
            pumps,
            acceptor: Some(acceptor),
        }
    }

    /// A DSN for database `dbname` through the proxy, in plaintext: the proxy counts
    /// protocol messages, which TLS would hide from it.
    pub fn dsn(&self, dbname: &str) -> String {
        format!(
            "postgres://{}@127.0.0.1:{}/{dbname}?sslmode=disable",
            server().user,
            self.port
        )
    }

    /// How many messages with `tag` the clients have sent so far.
    pub fn count(&self, tag: u8) -> u64 {
        self.counts[usize::from(tag)].load(Ordering::SeqCst)
    }

    /// Every tag's count, for "nothing at all was sent" checks.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::SeqCst)).sum()
    }
}

impl CountingProxy {
    /// Black-holes the proxy's port until the returned guard is dropped: the kernel
    /// drops every packet to or from it (a `tc` classifier on `lo` sends them to a queue
    /// of length 0), while the rest of the machine's loopback traffic flows. Needs `tc`
    /// (iproute2) and CAP_NET_ADMIN.
    pub fn freeze(&self) -> Frozen {
        Frozen::port(self.port)
    }
}

/// A black-holed port; dropping it lets packets through again.
pub struct Frozen {
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// One black hole at a time: they share the root queueing discipline of `lo`.
static BLACK_HOLE: Mutex<()> = Mutex::new(());

fn tc(args: &str) -> Result<(), String> {
    let tc = super::apt::binary(
        &["/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc"],
        "iproute2",
        "the black-hole test drops packets with tc",
    );
    let out = std::process::Command::new(tc)
        .args(args.split_whitespace())
        .output()
        .map_err(|e| {
            format!(
                "cannot run tc ({e}): the black-hole test needs iproute2's tc (apt-get install \
                 iproute2, which .ci/run does) and CAP_NET_ADMIN"
            )
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "tc {args}: {} (the black-hole test needs CAP_NET_ADMIN and the htb, pfifo and \
             u32 traffic-control modules)",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Frozen {
    fn port(port: u16) -> Frozen {
        let turn = BLACK_HOLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A leftover of a killed run goes first.
        let _ = tc("qdisc del dev lo root");
        let setup = [
            "qdisc add dev lo root handle 1: htb default 1".to_owned(),
            "class add dev lo parent 1: classid 1:1 htb rate 100gbit".to_owned(),
            "class add dev lo parent 1: classid 1:2 htb rate 100gbit".to_owned(),
            "qdisc add dev lo parent 1:2 handle 20: pfifo limit 0".to_owned(),
            format!(
                "filter add dev lo parent 1: protocol ip prio 1 u32 match ip dport {port} 0xffff \
                 flowid 1:2"
            ),
            format!(
                "filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport {port} 0xffff \
                 flowid 1:2"
            ),
        ];
        for step in &setup {
            if let Err(e) = tc(step) {
                let _ = tc("qdisc del dev lo root");
                panic!("{e}");
            }
        }
        Frozen { _turn: turn }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(e) = tc("qdisc del dev lo root") {
            eprintln!("could not lift the black hole: {e}");
        }
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in self.sockets.lock().unwrap().iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        for pump in self.pumps.lock().unwrap().drain(..) {
            let _ = pump.join();
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

fn pump_counting(mut from: TcpStream, mut to: TcpStream, counts: &[AtomicU64]) {
    let mut parser = FrontendParser::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Count before forwarding, so a reply can never overtake the count.
                parser.feed(&buf[..n], counts);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Splits the frontend byte stream into messages. The first message (and one after an
/// SSL or GSS encryption request) has no tag: `length, code, body`; later ones are
/// `tag, length, body`, the length counting itself but not the tag.
struct FrontendParser {
    untagged: bool,
    header: Vec<u8>,
    body_left: usize,
}

impl Default for FrontendParser {
    fn default() -> Self {
        FrontendParser {
            untagged: true,
            header: Vec::with_capacity(8),
            body_left: 0,
        }
    }
}

impl FrontendParser {
    fn feed(&mut self, mut data: &[u8], counts: &[AtomicU64]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let k = self.body_left.min(data.len());
                self.body_left -= k;
                data = &data[k..];
                continue;
            }
            let need = if self.untagged { 8 } else { 5 };
            let k = (need - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..k]);
            data = &data[k..];
            if self.header.len() < need {
                continue;
            }
            let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if self.untagged {
                let len = be(&self.header[0..4]);
                let code = be(&self.header[4..8]);
                self.body_left = len - 8;
                // SSLRequest / GSSENCRequest are followed by another untagged startup.
                self.untagged = code == 80_877_103 || code == 80_877_104;
            } else {
                let tag = self.header[0];
                self.body_left = be(&self.header[1..5]) - 4;
                counts[usize::from(tag)].fetch_add(1, Ordering::SeqCst);
            }
            self.header.clear();
        }
    }
}
