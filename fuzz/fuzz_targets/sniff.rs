//! The transparent listener's and the CONNECT tunnel's first look at agent bytes: the TLS
//! ClientHello / HTTP head sniffer, and the target derived from it.
//!
//! Invariants: never panics; a decided answer (anything but `NeedMore`) on a prefix below
//! the size bound is the answer on the whole input (the proxy decides on what it has read,
//! so reading more must not change its mind); a server name is never empty; a target taken
//! from the sniffed name is exactly the canonical form of that name, and the tunnel check
//! accepts it for that target.
#![no_main]

use airlock_policy::{Host, split_host_port};
use airlock_proxy::decide::{check_inner_host, transparent_target};
use airlock_proxy::sniff::{MAX_SNIFF, Sniff, sniff};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = sniff(data);
    for cut in [
        data.len() / 2,
        data.len().saturating_sub(1),
        data.len().min(5),
    ] {
        if cut < MAX_SNIFF && cut < data.len() {
            let early = sniff(&data[..cut]);
            if early != Sniff::NeedMore {
                assert_eq!(early, whole, "decided at {cut} bytes, changed with more");
            }
        }
    }
    if let Sniff::Tls(Some(name)) = &whole {
        assert!(!name.is_empty(), "empty SNI accepted");
    }
    for port in [443u16, 80] {
        if let Ok(target) = transparent_target(&whole, port) {
            match &whole {
                Sniff::Tls(Some(name)) => {
                    assert_eq!(Host::parse(name).ok().as_ref(), Some(&target.host));
                    assert_eq!(target.port, port);
                }
                Sniff::Http(Some(value)) => {
                    assert_eq!(
                        split_host_port(value, port),
                        Ok((target.host.clone(), port))
                    );
                }
                other => panic!("target {target:?} from {other:?}"),
            }
            assert_eq!(check_inner_host(&target, &whole), Ok(()));
        }
    }
});
