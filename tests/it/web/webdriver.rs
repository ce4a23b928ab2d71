//! A headless Chromium driven through chromedriver's W3C WebDriver protocol (JSON over
//! HTTP): just what the browser tests use. Debian's `chromium` and `chromium-driver`
//! are installed on first use when missing (`apt.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::request_json;
use crate::apt;

/// The key under which WebDriver returns an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    pub fn start() -> Browser {
        let chromium = apt::binary(
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
            "chromium",
            "the browser tests run a real, headless Chromium",
        );
        let chromedriver = apt::binary(
            &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
            "chromium-driver",
            "the browser tests drive Chromium through chromedriver",
        );
        let port = crate::pgbouncer::free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = std::net::TcpStream::connect(addr)
                .ok()
                .map(|_| request_json(addr, "GET", "/status", None))
                && status["value"]["ready"] == true
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let answer = request_json(
            addr,
            "POST",
            "/session",
            Some(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium.to_string_lossy(),
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,1000"]
                }
            }}})),
        );
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {answer}"))
            .to_owned();
        Browser {
            driver,
            addr,
            session,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let answer = request_json(
            self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        );
        if answer["value"].get("error").is_some() {
            panic!("WebDriver {method} {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({ "url": url })));
    }

    /// Runs `script` in the page and returns its value.
    pub fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(&json!({ "script": script, "args": [] })),
        )
    }

    /// What a person sees on the page (`innerText` of the body).
    pub fn text(&self) -> String {
        self.run("return document.body.innerText;")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Clicks the element `css` selects. A live page may swap its content between the
    /// lookup and the click; the element is then looked up again.
    pub fn click(&self, css: &str) {
        for _ in 0..5 {
            let found = self.call(
                "POST",
                "/element",
                Some(&json!({ "using": "css selector", "value": css })),
            );
            let id = found[ELEMENT].as_str().expect("an element").to_owned();
            let answer = request_json(
                self.addr,
                "POST",
                &format!("/session/{}/element/{id}/click", self.session),
                Some(&json!({})),
            );
            match answer["value"].get("error").and_then(Value::as_str) {
                None => return,
                Some("stale element reference") => continue,
                Some(_) => panic!("click {css}: {}", answer["value"]),
            }
        }
        panic!("click {css}: the element kept going stale");
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Saves a PNG of the viewport at `path`.
    pub fn screenshot(&self, path: &Path) {
        let data = self.call("GET", "/screenshot", None);
        let png = base64(data.as_str().expect("base64 PNG"));
        std::fs::write(path, png).unwrap();
    }

    /// Waits until `what` holds of the page's text, giving its last text on failure.
    pub fn wait_for_text(&self, limit: Duration, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.text();
            if f(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; the page says:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            request_json(
                self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            )
        }));
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where screenshots go for review: `target/web-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        })
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
