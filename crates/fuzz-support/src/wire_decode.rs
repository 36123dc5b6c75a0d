//! The total wire decoder (ARCHITECTURE.md, "Wire format"): any byte string must either
//! decode or be rejected with a reason, never panic, and whatever is accepted must
//! iterate exactly as its headers announce.

/// Decodes `data` as a datagram and checks what it iterates.
pub fn run(data: &[u8]) {
    let Ok(datagram) = ferrotx_wire::decode(data) else {
        return;
    };
    let mut count = 0;
    for message in datagram.messages() {
        assert_eq!(
            message.fragment.len(),
            message.header.fragment_len.get() as usize
        );
        count += 1;
    }
    assert_eq!(count, datagram.message_count());
}
