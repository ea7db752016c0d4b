//! A small HTTP/1.1 client over `std::net::TcpStream` for the tests: one
//! request per connection (`Connection: close`), every status an answer, no
//! redirects. The registry's dependency tree stays free of client crates.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Makes requests; `timeout` bounds each read and write.
#[derive(Clone, Debug)]
pub struct Agent {
    pub timeout: Duration,
}

impl Agent {
    pub fn request(&self, method: &str, url: &str) -> Request {
        Request {
            agent: self.clone(),
            method: method.to_string(),
            url: url.to_string(),
            headers: Vec::new(),
        }
    }
    pub fn get(&self, url: &str) -> Request {
        self.request("GET", url)
    }
    pub fn post(&self, url: &str) -> Request {
        self.request("POST", url)
    }
    pub fn put(&self, url: &str) -> Request {
        self.request("PUT", url)
    }
    pub fn delete(&self, url: &str) -> Request {
        self.request("DELETE", url)
    }
    pub fn options(&self, url: &str) -> Request {
        self.request("OPTIONS", url)
    }
}

/// A request being built.
#[derive(Debug)]
pub struct Request {
    agent: Agent,
    method: String,
    url: String,
    headers: Vec<(String, String)>,
}

/// An answer read to its end.
#[derive(Debug)]
pub struct Response {
    status: StatusCode,
    headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Response {
    pub fn status(&self) -> StatusCode {
        self.status
    }
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}

impl Request {
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn call(self) -> Result<Response, String> {
        self.exchange(None)
    }

    pub fn send(self, body: impl AsRef<[u8]>) -> Result<Response, String> {
        let body = body.as_ref().to_vec();
        self.exchange(Some(body))
    }

    fn exchange(self, body: Option<Vec<u8>>) -> Result<Response, String> {
        let rest = self
            .url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{}: only http:// URLs", self.url))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let mut stream = TcpStream::connect(host).map_err(|e| format!("{host}: {e}"))?;
        stream
            .set_read_timeout(Some(self.agent.timeout))
            .and_then(|_| stream.set_write_timeout(Some(self.agent.timeout)))
            .map_err(|e| e.to_string())?;
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n",
            self.method
        );
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = &body {
            head.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend(body.unwrap_or_default());
        // The server may answer (413) and close before the whole body is
        // sent: the answer is still read.
        let _ = stream.write_all(&out);
        let mut raw = Vec::new();
        let read = stream.read_to_end(&mut raw);
        if raw.is_empty() {
            return Err(match read {
                Err(e) => format!("no answer: {e}"),
                Ok(_) => "the connection closed without an answer".to_string(),
            });
        }
        parse(&raw)
    }
}

fn parse(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("an answer without the end of its head")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let code: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("a bad status line: {status_line:?}"))?;
    let mut headers = HeaderMap::new();
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            headers.append(
                HeaderName::from_bytes(k.trim().as_bytes()).map_err(|e| e.to_string())?,
                HeaderValue::from_str(v.trim()).map_err(|e| e.to_string())?,
            );
        }
    }
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let line_end = body[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("a chunk without its size line")?;
            let size_text = String::from_utf8_lossy(&body[at..at + line_end]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("a bad chunk size {size_text:?}"))?;
            at += line_end + 2;
            if size == 0 {
                break;
            }
            out.extend_from_slice(body.get(at..at + size).ok_or("a truncated chunk")?);
            at += size + 2;
        }
        body = out;
    }
    Ok(Response {
        status: StatusCode::from_u16(code).map_err(|e| e.to_string())?,
        headers,
        body,
    })
}
