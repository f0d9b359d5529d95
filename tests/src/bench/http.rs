//! A minimal HTTP/1.1 client over one keep-alive loopback connection, used by
//! the benchmarks to replay recorded model requests against the scripted
//! server: it measures what the server and the loopback cost per request with
//! nothing of the product's HTTP or SSE code in the way. It reads a response
//! completely (`Content-Length` or chunked) and does not interpret the body.
//!
//! It is a measuring instrument for the scripted server only, not a general
//! HTTP client: no TLS, no redirects, no compression.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Largest response head (status line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest response body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A complete response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// One keep-alive connection to a loopback server.
pub struct RawHttpClient {
    stream: BufReader<TcpStream>,
    host: String,
}

impl RawHttpClient {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        })
    }

    /// Sends `POST path` with a JSON `body` and reads the whole response.
    pub async fn post_json(&mut self, path: &str, body: &[u8]) -> io::Result<RawResponse> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             accept: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        let writer = self.stream.get_mut();
        writer.write_all(head.as_bytes()).await?;
        writer.write_all(body).await?;
        writer.flush().await?;
        read_response(&mut self.stream).await
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Reads one line ending in CRLF (or LF), without the line ending, counting
/// its bytes against `budget`.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    budget: &mut usize,
) -> io::Result<String> {
    let mut line = Vec::new();
    let read = reader.read_until(b'\n', &mut line).await?;
    if read == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a response",
        ));
    }
    *budget = budget
        .checked_sub(read)
        .ok_or_else(|| invalid(format!("response head over {MAX_HEAD_BYTES} bytes")))?;
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| invalid("response head is not UTF-8"))
}

/// Reads one HTTP/1.1 response from `reader`: status line, headers, and the
/// body framed by `Transfer-Encoding: chunked` or `Content-Length` (no body
/// when neither is present).
pub async fn read_response<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<RawResponse> {
    let mut budget = MAX_HEAD_BYTES;
    let status_line = read_line(reader, &mut budget).await?;
    let mut parts = status_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(invalid(format!("bad status line {status_line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(invalid(format!("not an HTTP/1 response: {status_line:?}")));
    }
    let status: u16 = code
        .parse()
        .map_err(|_| invalid(format!("bad status code in {status_line:?}")))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    loop {
        let line = read_line(reader, &mut budget).await?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid(format!("bad header line {line:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| invalid(format!("bad content-length {value:?}")))?,
            );
        }
    }
    let body = if chunked {
        read_chunked(reader).await?
    } else {
        let length = length.unwrap_or(0);
        if length > MAX_BODY_BYTES {
            return Err(invalid(format!("body of {length} bytes is too large")));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        body
    };
    Ok(RawResponse { status, body })
}

/// Reads a chunked body up to and including its last chunk and trailers.
async fn read_chunked<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut budget = MAX_HEAD_BYTES;
        let size_line = read_line(reader, &mut budget).await?;
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size line {size_line:?}")))?;
        if size == 0 {
            // Trailers, then the empty line that ends the message.
            while !read_line(reader, &mut budget).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("chunked body is too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).await?;
        if !read_line(reader, &mut budget).await?.is_empty() {
            return Err(invalid("chunk not followed by CRLF"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(bytes: &[u8]) -> io::Result<RawResponse> {
        let mut reader = BufReader::new(bytes);
        read_response(&mut reader).await
    }

    #[tokio::test]
    async fn reads_a_chunked_body_and_stops_at_its_end() {
        let wire = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                     transfer-encoding: chunked\r\n\r\n\
                     5\r\nhello\r\n7;ext=1\r\n world!\r\n0\r\n\r\nHTTP/1.1 204";
        let mut reader = BufReader::new(&wire[..]);
        let response = read_response(&mut reader).await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"hello world!");
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "HTTP/1.1 204", "the next response is left unread");
    }

    #[tokio::test]
    async fn reads_a_content_length_body() {
        let response =
            parse(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\n\r\nslowEXTRA")
                .await
                .unwrap();
        assert_eq!(response.status, 429);
        assert_eq!(response.body, b"slow");
    }

    #[tokio::test]
    async fn malformed_responses_are_errors() {
        assert!(parse(b"").await.is_err());
        assert!(parse(b"SPDY 200 OK\r\n\r\n").await.is_err());
        assert!(parse(b"HTTP/1.1 abc OK\r\n\r\n").await.is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n").await.is_err());
        assert!(
            parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")
                .await
                .is_err()
        );
        assert!(
            parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n")
                .await
                .is_err()
        );
        assert!(
            parse(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
                .await
                .is_err()
        );
        let huge = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_BODY_BYTES + 1
        );
        assert!(parse(huge.as_bytes()).await.is_err());
    }
}
