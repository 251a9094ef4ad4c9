use super::sidecar::flock_holder;
use super::*;
use crate::clock::BootTime;

#[test]
fn flock_holders_are_found_in_proc_locks() {
    let dev = libc::makedev(0, 0x2d);
    let locks = "\
1: POSIX  ADVISORY  WRITE 77 00:2d:5678 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF
2: -> FLOCK  ADVISORY  WRITE 99 00:2d:5678 0 EOF
3: FLOCK  ADVISORY  WRITE 555 00:2d:9999 0 EOF
";
    assert_eq!(flock_holder(locks, dev, 5678), Some(1234));
    assert_eq!(flock_holder(locks, dev, 9999), Some(555));
    assert_eq!(flock_holder(locks, dev, 1), None);
    assert_eq!(flock_holder(locks, libc::makedev(8, 1), 5678), None);
    // Only a waiter: nobody to name.
    let waiting = "2: -> FLOCK  ADVISORY  WRITE 99 00:2d:5678 0 EOF\n";
    assert_eq!(flock_holder(waiting, dev, 5678), None);
}

#[test]
fn temporary_file_names() {
    assert!(is_temp_name(".job.0123456789abcdef.tmp"));
    assert!(is_temp_name(".a.b.0123456789ABCDEF.tmp"));
    for not in [
        "job",
        ".job.lock",
        ".0123456789abcdef.tmp",
        ".job.0123456789abcdeg.tmp",
        ".job.0123.tmp",
        "job.0123456789abcdef.tmp",
    ] {
        assert!(!is_temp_name(not), "{not}");
    }
}

#[test]
fn stamps_parse_with_and_without_a_time_namespace() {
    let with = Stamp::parse("b00t 42 time:[4026531834]").unwrap();
    assert_eq!(with.time_namespace.as_deref(), Some("time:[4026531834]"));
    assert_eq!(with.since_boot, Duration::from_nanos(42));
    let old = Stamp::parse("b00t 42").unwrap();
    assert_eq!(old.time_namespace, None);
    for bad in ["", "b00t", "b00t x", "b00t 42 ns extra"] {
        assert_eq!(Stamp::parse(bad), None, "{bad}");
    }
    let now = BootTime {
        boot_id: "b00t".into(),
        time_namespace: "time:[4026531834]".into(),
        since_boot: Duration::from_secs(1),
    };
    assert!(with.same_clock_as(&now));
    assert!(!old.same_clock_as(&now));
    let other = Stamp::parse("b00t 42 time:[4026532177]").unwrap();
    assert!(!other.same_clock_as(&now));
}
