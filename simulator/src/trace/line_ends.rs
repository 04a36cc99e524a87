//! A trace read the same whatever its line endings: CRLF and a CR alone (old Mac files) reach
//! every reader as LF, and a UTF-8 byte-order mark at the start is dropped, so that a row is a
//! line and a line number the one an editor shows, in every format.

use std::io::{self, Read};

/// Reads `inner` with CRLF and lone CR made LF and a leading byte-order mark dropped.
pub(crate) struct LineEnds<R> {
    inner: R,
    /// The last byte translated was a CR made LF: a LF right after it is its pair.
    after_cr: bool,
    /// Whether the start was checked for a byte-order mark.
    started: bool,
    /// Translated bytes not yet handed out, from `at` on.
    pending: Vec<u8>,
    at: usize,
}

const BOM: &[u8] = b"\xef\xbb\xbf";

impl<R: Read> LineEnds<R> {
    pub(crate) fn new(inner: R) -> Self {
        LineEnds { inner, after_cr: false, started: false, pending: Vec::new(), at: 0 }
    }

    /// Translates `raw` onto the pending bytes.
    fn push(&mut self, raw: &[u8]) {
        for &b in raw {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' => {
                    self.pending.push(b'\n');
                    self.after_cr = true;
                }
                _ => {
                    self.pending.push(b);
                    self.after_cr = false;
                }
            }
        }
    }
}

impl<R: Read> Read for LineEnds<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut chunk = [0u8; 8192];
        if !self.started {
            self.started = true;
            let mut head = Vec::with_capacity(BOM.len());
            while head.len() < BOM.len() && BOM.starts_with(&head) {
                let n = self.inner.read(&mut chunk[..1])?;
                if n == 0 {
                    break;
                }
                head.push(chunk[0]);
            }
            if head != BOM {
                self.push(&head);
            }
        }
        while self.at == self.pending.len() {
            self.pending.clear();
            self.at = 0;
            let n = self.inner.read(&mut chunk)?;
            if n == 0 {
                return Ok(0);
            }
            self.push(&chunk[..n]);
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &[u8], chunk: usize) -> Vec<u8> {
        struct Chunks<'a>(&'a [u8], usize);
        impl Read for Chunks<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut reader = LineEnds::new(Chunks(input, chunk));
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        // One byte at a time: the smallest buffer a caller may hand in.
        while reader.read(&mut byte).expect("in memory") == 1 {
            out.push(byte[0]);
        }
        out
    }

    #[test]
    fn every_line_ending_reads_as_lf_in_any_chunking() {
        let input = b"\xef\xbb\xbfa,b\r\nc\rd\n\r\re\r";
        for chunk in 1..=input.len() {
            assert_eq!(read_all(input, chunk), b"a,b\nc\nd\n\n\ne\n", "chunks of {chunk}");
        }
    }

    #[test]
    fn a_short_input_without_a_mark_stays_whole() {
        assert_eq!(read_all(b"\xef\xbb", 1), b"\xef\xbb");
        assert_eq!(read_all(b"ab", 1), b"ab");
        assert_eq!(read_all(b"", 1), b"");
    }
}
