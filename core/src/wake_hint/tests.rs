//! Wake hints: the datagram's format, what the receiver ignores, and delivery over 127.0.0.1.

#![allow(clippy::disallowed_methods)] // waits for another thread in real time, bounded

use std::net::UdpSocket;
use std::time::Duration;

use super::*;

#[test]
fn the_key_hash_is_fnv1a_the_same_in_every_process() {
    // The published FNV-1a 64 test vectors: no per-process seed, no library's choice.
    assert_eq!(key_hash(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(key_hash("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(key_hash("foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn a_hint_names_the_lock_and_the_waiter_and_parses_back() {
    let id = "0123456789abcdef0123456789abcdef";
    let m = message("locks/job", id).unwrap();
    assert_eq!(
        String::from_utf8(m.clone()).unwrap(),
        format!("LH1 {:016x} {id}", key_hash("locks/job"))
    );
    assert_eq!(parse(&m), Some((key_hash("locks/job"), id)));
    assert!(m.len() <= MAX_HINT_LEN);
}

#[test]
fn an_id_too_long_for_one_hint_sends_none() {
    let longest = "x".repeat(MAX_HINT_LEN - 21);
    assert_eq!(message("k", &longest).unwrap().len(), MAX_HINT_LEN);
    assert_eq!(message("k", &format!("{longest}x")), None);
}

#[test]
fn garbage_is_not_a_hint() {
    let good = format!("LH1 {:016x} abc", key_hash("k"));
    assert!(parse(good.as_bytes()).is_some());
    for bad in [
        "".to_string(),
        "LH1".to_string(),
        format!("LH2 {:016x} abc", key_hash("k")),
        format!("LH1 {:015x} abc", 5),
        "LH1 zzzzzzzzzzzzzzzz abc".to_string(),
        format!("LH1 {:016x} ", key_hash("k")),
        format!("LH1 {:016x} a b", key_hash("k")),
        format!("LH1 {:016x} {}", key_hash("k"), "x".repeat(MAX_HINT_LEN)),
    ] {
        assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
    }
    assert_eq!(parse(&[0xff, 0xfe, 0x00]), None);
}

#[test]
fn a_wake_field_is_a_udp_address() {
    assert_eq!(
        parse_address("udp:127.0.0.1:40123"),
        Some("127.0.0.1:40123".parse().unwrap())
    );
    assert_eq!(
        parse_address("udp:[::1]:9"),
        Some("[::1]:9".parse().unwrap())
    );
    for bad in [
        "tcp:127.0.0.1:1",
        "127.0.0.1:1",
        "udp:localhost:1",
        "udp:1.2.3.4",
    ] {
        assert_eq!(parse_address(bad), None, "{bad}");
    }
}

#[test]
fn wake_hints_parse_from_the_options_text() {
    assert_eq!("off".parse::<WakeHints>().unwrap(), WakeHints::Off);
    assert_eq!(
        "loopback".parse::<WakeHints>().unwrap(),
        WakeHints::Loopback
    );
    assert_eq!(
        "10.0.0.5".parse::<WakeHints>().unwrap(),
        WakeHints::Listen("10.0.0.5".parse().unwrap())
    );
    assert_eq!("route".parse::<WakeHints>().unwrap(), WakeHints::Route);
    let e = "eth0".parse::<WakeHints>().unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Invalid);
    assert!(
        e.to_string().contains("off") && e.to_string().contains("route"),
        "{e}"
    );
}

/// `route` listens on the address the default route leaves from (the kernel's choice for a
/// connected UDP socket, the source `ip route get` shows), one of this host's own, and on
/// loopback when there is no route. Nothing is sent: the listener's address is only checked.
#[test]
fn route_listens_where_the_default_route_leaves_from() {
    let l = listener(&WakeHints::Route).expect("a listener");
    let at = parse_address(&l.wake_field()).expect("its wake field").ip();
    match route_address() {
        Some(ip) => {
            assert_eq!(at, ip);
            // One of this host's own addresses: a socket binds to it.
            assert!(UdpSocket::bind((ip, 0)).is_ok(), "{ip} is not this host's");
        }
        None => assert!(at.is_loopback(), "{at}"),
    }
}

#[test]
fn hints_off_bind_nothing() {
    assert!(listener(&WakeHints::Off).is_none());
}

/// Wait (bounded) for `n` to be notified; true if it was.
fn woken(n: &Notify) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), n.notified())
            .await
            .is_ok()
    })
}

/// Send `datagram` to the listener from another socket.
fn send_raw(l: &Listener, datagram: &[u8]) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(datagram, l.address).unwrap();
}

#[test]
fn the_listener_wakes_the_named_waiter_only_and_is_shared() {
    let l = listener(&WakeHints::Loopback).expect("a loopback listener");
    // One socket per interface per process: every waiter gets the same one.
    let again = listener(&WakeHints::Loopback).unwrap();
    assert!(Arc::ptr_eq(&l, &again));
    assert!(parse_address(&l.wake_field()).is_some_and(|a| a.ip().is_loopback()));

    let a = l.register("locks/a", "waiter-a");
    let b = l.register("locks/b", "waiter-b");
    // The wrong key for b, garbage, an unknown id, an oversized datagram: nobody is woken;
    // then a hint for b: b is woken, a is not.
    send_raw(&l, &message("locks/a", "waiter-b").unwrap());
    send_raw(&l, b"hello");
    send_raw(&l, &message("locks/a", "nobody").unwrap());
    let mut big = message("locks/a", "waiter-a").unwrap();
    big.resize(MAX_HINT_LEN + 1, b'a');
    send_raw(&l, &big);
    send_raw(&l, &message("locks/b", "waiter-b").unwrap());
    assert!(woken(&b.notify), "b's hint woke b");
    // The datagrams are handled in order on one thread: everything before b's hint was seen,
    // and none of it woke a (its permit would be stored).
    send_raw(&l, &message("locks/a", "waiter-a").unwrap());
    assert!(woken(&a.notify));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let extra = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(50), a.notify.notified())
            .await
            .is_ok()
    });
    assert!(!extra, "a was woken once, by its own hint");

    // A dropped registration is gone: its hints are ignored.
    drop(b);
    assert!(!l.serves("waiter-b"));
    assert!(l.serves("waiter-a"));
}

#[test]
fn sending_to_nobody_or_to_garbage_never_fails_or_blocks() {
    // A port nobody listens on (bound, then closed), an address that is not one, this
    // process's own waiter (woken directly, not by a datagram).
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for _ in 0..100 {
        send("locks/a", "someone", &format!("udp:127.0.0.1:{port}"));
    }
    send("locks/a", "someone", "udp:not-an-address");
    send("locks/a", "someone", "mailto:x");
}

/// A shared session's grant keeps its registration from its wait, moved into its session's
/// set: a hint naming it adds its number there and wakes the set's one task, not its own
/// `notify`; the task takes a bounded batch, and is woken again for what it left.
#[test]
fn a_registration_moved_into_a_set_adds_its_number_and_wakes_the_sets_task() {
    let l = listener(&WakeHints::Loopback).expect("a loopback listener");
    let set = Arc::new(HintSet::default());
    let regs: Vec<Registration> = (1..=3)
        .map(|n| l.register("locks/s", &format!("sid.{n}")).into_set(&set, n))
        .collect();
    assert!(set.take(10).is_empty(), "nothing named yet");
    for n in [3, 1, 2] {
        l.wake(key_hash("locks/s"), &format!("sid.{n}"));
    }
    // Another key's hint for the same id names nothing.
    l.wake(key_hash("locks/t"), "sid.1");
    assert!(woken(&set.notify), "the set's task was woken");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let own = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(50), regs[0].notify.notified())
            .await
            .is_ok()
    });
    assert!(!own, "not the registration's own notify");
    assert_eq!(set.take(2), vec![1, 2], "a bounded batch, lowest first");
    assert!(woken(&set.notify), "woken again for what it left");
    assert_eq!(set.take(2), vec![3]);
    assert!(set.take(2).is_empty());
    // Dropped: unregistered, its hints ignored.
    drop(regs);
    assert!(!l.serves("sid.1"));
    assert!(!l.wake(key_hash("locks/s"), "sid.1"));
    assert!(set.take(10).is_empty());
}
