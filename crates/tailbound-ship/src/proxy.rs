//! A TCP proxy on 127.0.0.1 that can cut every connection and refuse new ones: a broker that is
//! unreachable while it runs, for the fault loop.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

struct State {
    target: SocketAddr,
    cut: AtomicBool,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

impl State {
    fn close_all(&self) {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        for c in conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// Forwards `127.0.0.1:port()` to a target until dropped.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub fn start(target: SocketAddr) -> io::Result<Proxy> {
        Proxy::start_on(0, target)
    }

    /// Listens on `port` of 127.0.0.1 (0: a free one) and forwards to `target`.
    pub fn start_on(port: u16, target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            target,
            cut: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let s = state.clone();
        let accept = std::thread::Builder::new()
            .name("ship-proxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    if s.cut.load(Ordering::Acquire) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(s.target) else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let pipes = (|| -> io::Result<_> {
                        let mut conns = s.conns.lock().unwrap_or_else(|p| p.into_inner());
                        conns.push(client.try_clone()?);
                        conns.push(server.try_clone()?);
                        Ok((client.try_clone()?, server.try_clone()?))
                    })();
                    let Ok((client2, server2)) = pipes else {
                        continue;
                    };
                    spawn_pipe(client, server);
                    spawn_pipe(server2, client2);
                }
            })?;
        Ok(Proxy {
            port,
            state,
            accept: Some(accept),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts every open connection and refuses new ones (`true`), or lets them through again.
    pub fn cut(&self, cut: bool) {
        self.state.cut.store(cut, Ordering::Release);
        if cut {
            self.state.close_all();
        }
    }
}

fn spawn_pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::thread::Builder::new()
        .name("ship-proxy-pipe".into())
        .spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.state.close_all();
        // Wakes the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}
