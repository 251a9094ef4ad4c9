use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

const SID: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn a_shared_session_lives_under_its_prefix_in_the_sessions_directory() {
    assert_eq!(
        shared_session_key("", SID),
        format!(".lease-sessions/{SID}")
    );
    assert_eq!(
        shared_session_key("team-a/", SID),
        format!("team-a/.lease-sessions/{SID}")
    );
}

#[test]
fn a_prefix_is_empty_or_a_directory_of_bounded_length() {
    assert!(valid_prefix(""));
    assert!(valid_prefix("team-a/"));
    assert!(!valid_prefix("team-a"));
    assert!(!valid_prefix(&format!("{}/", "a".repeat(MAX_PREFIX_LEN))));
    assert!(valid_prefix(&format!(
        "{}/",
        "a".repeat(MAX_PREFIX_LEN - 1)
    )));
}

#[test]
fn an_attached_id_is_the_sessions_32_hex_digits_and_a_number_from_one() {
    let id = SharedId::parse(&format!("{SID}.17")).unwrap();
    assert_eq!(id.sid, SID);
    assert_eq!(id.n, 17);
    assert_eq!(id.id(), format!("{SID}.17"));
    for bad in [
        format!("{SID}.0"),
        format!("{SID}.017"),
        format!("{SID}."),
        format!("{SID}.-1"),
        format!("{SID}.+1"),
        format!("{SID}.1.2"),
        format!("{SID}.18446744073709551616"),
        format!("{}.1", &SID[1..]),
        format!("{SID}0.1"),
        format!("{}.1", SID.to_uppercase()),
        format!("{}g.1", &SID[1..]),
        SID.to_string(),
        "me".to_string(),
    ] {
        assert_eq!(SharedId::parse(&bad), None, "{bad}");
    }
    assert_eq!(
        SharedId::parse(&format!("{SID}.18446744073709551615")).map(|i| i.n),
        Some(u64::MAX)
    );
}

#[test]
fn the_attached_set_has_one_text_and_refuses_every_other() {
    for good in ["", "1", "1-2", "1-4096,4098", "3,5,7-9,11"] {
        assert_eq!(Attached::parse(good).unwrap().text(), good, "{good}");
    }
    for bad in [
        "0", "01", "1-1", "2-1", "1,1", "2,1", "1,2", "1-3,4", "1-3,3-5", "1,", ",1", "a", "1 - 2",
        "-1", "1-",
    ] {
        assert_eq!(Attached::parse(bad), None, "{bad}");
    }
}

#[test]
fn attaching_and_detaching_join_and_split_ranges() {
    let mut a = Attached::default();
    assert!(a.is_empty());
    for n in [1, 2, 3, 5, 4, 10] {
        a.insert(n);
    }
    assert_eq!(a.text(), "1-5,10");
    assert_eq!(a.len(), 6);
    assert!(!a.is_empty());
    // Attached already, at a range's start, inside, at its end: nothing changes.
    for n in [1, 3, 5, 10] {
        a.insert(n);
        assert_eq!(a.text(), "1-5,10", "{n}");
    }
    a.remove(3);
    assert_eq!(a.text(), "1-2,4-5,10");
    a.remove(1);
    a.remove(5);
    assert_eq!(a.text(), "2,4,10");
    a.remove(7);
    a.remove(10);
    assert_eq!(a.text(), "2,4");
    a.insert(3);
    assert_eq!(a.text(), "2-4");
    assert!(!a.contains(1) && a.contains(2) && a.contains(4) && !a.contains(5));
}

#[test]
fn ten_thousand_grants_taken_in_bulk_cost_a_few_bytes_and_the_worst_case_fits() {
    let mut a = Attached::default();
    for n in 1..=10_000 {
        a.insert(n);
    }
    assert_eq!(a.text(), "1-10000");
    // Every other one released: about 7 bytes a grant left, far under the limit.
    for n in (1..=10_000).step_by(2) {
        a.remove(n);
    }
    assert_eq!(a.len(), 5_000);
    assert!(a.text().len() < 5_000 * 7, "{}", a.text().len());
    assert!(a.text().len() < MAX_ATTACHED_LEN);
}

#[test]
fn rule_four_says_detached_only_from_an_attached_set_that_parses() {
    assert_eq!(attachment(Some("1-3"), 2), Attachment::Attached);
    assert_eq!(attachment(Some("1-3"), 4), Attachment::Detached);
    assert_eq!(attachment(Some(""), 1), Attachment::Detached);
    assert_eq!(attachment(None, 1), Attachment::Unknown);
    assert_eq!(attachment(Some("3-1"), 2), Attachment::Unknown);
}

proptest! {
    /// Whatever is attached and detached, in any order: the set holds exactly what a plain set
    /// holds, and its text parses back to it.
    #[test]
    fn the_attached_set_is_a_set(ops in prop::collection::vec((any::<bool>(), 1u64..40), 0..80)) {
        let mut a = Attached::default();
        let mut model = BTreeSet::new();
        for (attach, n) in ops {
            if attach {
                a.insert(n);
                model.insert(n);
            } else {
                a.remove(n);
                model.remove(&n);
            }
            prop_assert_eq!(Attached::parse(&a.text()), Some(a.clone()));
            prop_assert_eq!(a.text_len(), a.text().len());
            prop_assert_eq!(a.len(), model.len() as u64);
            for n in 0..42 {
                prop_assert_eq!(a.contains(n), model.contains(&n), "{} in {}", n, a.text());
            }
        }
    }
}

#[test]
fn the_length_of_the_text_is_counted_without_making_it() {
    let mut a = Attached::default();
    assert_eq!(a.text_len(), 0);
    for (n, text) in [
        (9, "9"),
        (10, "9-10"),
        (12, "9-10,12"),
        (99, "9-10,12,99"),
        (100, "9-10,12,99-100"),
        (u64::MAX, "9-10,12,99-100,18446744073709551615"),
    ] {
        a.insert(n);
        assert_eq!(a.text(), text);
        assert_eq!(a.text_len(), text.len(), "{text}");
    }
}
