//! memcached's binary protocol, as far as Larder meets it: it does not
//! speak it, and says so in that protocol.
//!
//! memcached picks a connection's protocol from its first byte: `0x80`, a
//! binary request's magic, which no text command starts with. Larder looks
//! at the same byte. A binary client waiting for a binary reply would
//! otherwise wait for good, since its request holds no line break for the
//! text protocol to end on. [`write_not_supported`] answers each request
//! with the protocol's own "Not supported" status and a message saying
//! which protocols to use, which a binary client reports as the request's
//! error; the request's body ([`body_bytes`]) is skipped.

use bytes::BufMut;

/// The first byte of every binary request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every binary response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Bytes in a binary request's or response's header.
pub const HEADER_BYTES: usize = 24;
/// The binary protocol's "Not supported" status.
pub const STATUS_NOT_SUPPORTED: u16 = 0x0083;
/// The body of the "Not supported" response.
pub const NOT_SUPPORTED_MESSAGE: &[u8] =
    b"Not supported: Larder speaks the memcached text and meta protocols, not the binary protocol";

/// The `quit` request's opcode, and its quiet form's: the connection
/// closes after the response (none for the quiet one).
pub const OPCODES_QUIT: [u8; 2] = [0x07, 0x17];

/// Bytes after the header: extras, key and value.
pub fn body_bytes(request: &[u8; HEADER_BYTES]) -> u32 {
    u32::from_be_bytes([request[8], request[9], request[10], request[11]])
}

/// Appends the "Not supported" response to the request whose header is
/// `request`: the same opcode and opaque, no extras, key or cas, and
/// [`NOT_SUPPORTED_MESSAGE`] as its value.
pub fn write_not_supported(out: &mut impl BufMut, request: &[u8; HEADER_BYTES]) {
    let opcode = request[1];
    let opaque = &request[12..16];
    out.put_u8(RESPONSE_MAGIC);
    out.put_u8(opcode);
    out.put_u16(0); // key length
    out.put_u8(0); // extras length
    out.put_u8(0); // data type: raw bytes
    out.put_u16(STATUS_NOT_SUPPORTED);
    out.put_u32(NOT_SUPPORTED_MESSAGE.len() as u32);
    out.put_slice(opaque);
    out.put_u64(0); // cas
    out.put_slice(NOT_SUPPORTED_MESSAGE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_echoes_the_opcode_and_opaque_and_carries_the_message() {
        let mut request = [0u8; HEADER_BYTES];
        request[0] = REQUEST_MAGIC;
        request[1] = 0x0b; // version
        request[12..16].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut out = Vec::new();
        write_not_supported(&mut out, &request);

        let Some((header, body)) = out.split_first_chunk::<HEADER_BYTES>() else {
            panic!("a response of {} bytes, shorter than a header", out.len());
        };
        assert_eq!(header[0], RESPONSE_MAGIC);
        assert_eq!(header[1], 0x0b);
        assert_eq!(&header[2..6], &[0, 0, 0, 0]);
        assert_eq!(u16::from_be_bytes([header[6], header[7]]), 0x0083);
        let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        assert_eq!(body_len as usize, body.len());
        assert_eq!(&header[12..16], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&header[16..24], &[0; 8]);
        assert_eq!(body, NOT_SUPPORTED_MESSAGE);
    }
}
